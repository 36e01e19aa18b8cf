package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// A StatefulSet made by a lull that predates lull.dev/session-uid carries
// no such label. When a live session's StatefulSet of that kind has lost
// its owner reference too, the reaper must not take it for a
// predecessor's: deleting it deletes the session's pod (busy or not)
// without a drain. It was created after the Session, so it is the
// session's own: its owner reference is restored, and it is never
// recreated. (envtest runs no garbage collector: the pod would stay
// regardless; the StatefulSet itself is what is checked.)
func TestLiveSessionsUnlabelledStatefulSetIsNeverReaped(t *testing.T) {
	t.Parallel()
	ns := startManager(t)
	n := runs.Add(1)
	tpl := newTemplate(ns, fmt.Sprintf("preupgrade-tpl%d", n), "example.com/runtime:v1")
	if err := admin.Create(t.Context(), tpl); err != nil {
		t.Fatal(err)
	}
	s := newSession(ns, fmt.Sprintf("preupgrade%d", n), tpl.Name)
	if err := admin.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	sts := rendered(t, s)[4].(*appsv1.StatefulSet)
	pod := createPod(t, sts, "rev-1")
	waitStatus(t, ns, s.Name, "the status names the pod", func(st lullv1.SessionStatus) bool { return st.PodUID == pod.UID })

	patch := `[{"op":"remove","path":"/metadata/ownerReferences"},{"op":"remove","path":"/metadata/labels/lull.dev~1session-uid"}]`
	if err := admin.Patch(t.Context(), sts, client.RawPatch(types.JSONPatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the StatefulSet's owner reference is restored", func(ctx context.Context) error {
		cur := &appsv1.StatefulSet{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(sts), cur); err != nil {
			return fmt.Errorf("%w: the live session's StatefulSet was reaped with its pod", err)
		}
		if cur.UID != sts.UID {
			return fmt.Errorf("replaced (uid %s, was %s): the live session's StatefulSet was reaped with its pod", cur.UID, sts.UID)
		}
		if cur.DeletionTimestamp != nil {
			return fmt.Errorf("being deleted: the live session's StatefulSet was reaped with its pod")
		}
		if !metav1.IsControlledBy(cur, s) {
			return fmt.Errorf("controller %+v", metav1.GetControllerOf(cur))
		}
		return nil
	})
}

// A user's own Service that carries lull.dev/session=<name> (labelled like
// its selector, to reach the session's pod on another port) is not an
// object lull made: the reaper leaves it alone while the session lives.
func TestUsersObjectLabelledForALiveSessionIsLeftAlone(t *testing.T) {
	t.Parallel()
	ns := startManager(t)
	n := runs.Add(1)
	tpl := newTemplate(ns, fmt.Sprintf("userobj-tpl%d", n), "example.com/runtime:v1")
	if err := admin.Create(t.Context(), tpl); err != nil {
		t.Fatal(err)
	}
	s := newSession(ns, fmt.Sprintf("userobj%d", n), tpl.Name)
	if err := admin.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	rendered(t, s)
	sel := map[string]string{lullv1.LabelSession: s.Name}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.Name + "-public", Labels: sel},
		Spec: corev1.ServiceSpec{Selector: sel, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	if err := admin.Create(t.Context(), svc); err != nil {
		t.Fatal(err)
	}
	consistently(t, 3*time.Second, "the user's Service "+svc.Name+" is left alone", func(ctx context.Context) error {
		if err := gone(ctx, svc); err == nil {
			return fmt.Errorf("reaped: lull deleted an object it never made")
		}
		return nil
	})
}
