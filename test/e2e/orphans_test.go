package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// orphanSession deletes a busy session with --cascade=orphan (the garbage
// collector strips the owner references of its objects and leaves them) and
// returns what it left: its identity, Service, StatefulSet and pod.
func orphanSession(t *testing.T, ns, name string) []client.Object {
	t.Helper()
	ctx := context.Background()
	s := session(t, ns, name)
	p := pod(t, ns, name)
	if p == nil {
		t.Fatal("the session has no pod")
	}
	eventually(t, 30*time.Second, "the session is busy (a turn is open)", func() error { return openTurn(t, p.UID) })
	// The reaper deletes the pod of a Session the user deleted: no drain
	// is owed to a session that no longer exists.
	auditor.Exempt(p.UID, "its Session was deleted with --cascade=orphan")
	left := []client.Object{p}
	identity := lullv1.RuntimeIdentityName(name)
	for _, o := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: identity}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: identity}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: identity}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
	} {
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			t.Fatal(err)
		}
		left = append(left, o)
	}
	if err := c.Delete(ctx, s, client.PropagationPolicy(metav1.DeletePropagationOrphan), client.Preconditions{UID: &s.UID}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the Session is deleted", func() error {
		err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &lullv1.Session{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
	return left
}

// busy are the reference runtime's arguments for a session that is in a
// turn most of the time.
var busy = []string{"--turn-min=1s", "--turn-max=2s", "--think-max=100ms"}

// reaped returns nil once every object of left (by UID) is gone.
func reaped(left []client.Object) error {
	for _, o := range left {
		cur := o.DeepCopyObject().(client.Object)
		err := c.Get(context.Background(), client.ObjectKeyFromObject(o), cur)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return err
		case cur.GetUID() == o.GetUID():
			return fmt.Errorf("%T %s (uid %s) is still there", o, o.GetName(), o.GetUID())
		}
	}
	return nil
}

// reapedEvents returns the OrphanReaped Events recorded in ns.
func reapedEvents(t *testing.T, ns string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Reason == lullv1.ReasonOrphanReaped {
			out = append(out, e)
		}
	}
	return out
}

// A busy session deleted with --cascade=orphan leaves nothing behind: its
// StatefulSet, pod, identity and Service are reaped, each with an Event.
func TestOrphanedSessionIsReaped(t *testing.T) {
	ns, names, _ := setup(t, 1, busy...)
	left := orphanSession(t, ns, names[0])
	eventually(t, time.Minute, "everything the session left is reaped", func() error { return reaped(left) })
	eventually(t, 10*time.Second, "an OrphanReaped Event for the StatefulSet", func() error {
		for _, e := range reapedEvents(t, ns) {
			if e.Regarding.Kind == "StatefulSet" && e.Regarding.Name == names[0] {
				return nil
			}
		}
		return fmt.Errorf("none among %d OrphanReaped Events", len(reapedEvents(t, ns)))
	})
}

// A busy session deleted with --cascade=orphan and created again under its
// name runs a new pod of its own: its predecessor's pod, StatefulSet and
// identity are gone first, never adopted.
func TestRecreatedSessionRunsANewPod(t *testing.T) {
	ns, names, _ := setup(t, 1, busy...)
	name := names[0]
	left := orphanSession(t, ns, name)
	oldPod := left[0].GetUID()

	s := &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: lullv1.SessionSpec{TemplateRef: lullv1.TemplateReference{Name: "rt"}}}
	if err := c.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the predecessor's objects are gone", func() error { return reaped(left) })
	eventually(t, time.Minute, "the recreated session runs a new pod", func() error {
		cur := session(t, ns, name)
		p := pod(t, ns, name)
		switch {
		case p == nil:
			return fmt.Errorf("no pod (%s)", cur.Status.Phase)
		case p.UID == oldPod:
			return fmt.Errorf("pod %s is the predecessor's", p.UID)
		case cur.Status.Phase != lullv1.SessionRunning || cur.Status.PodUID != p.UID:
			return fmt.Errorf("phase %s, status pod %s, pod %s", cur.Status.Phase, cur.Status.PodUID, p.UID)
		}
		if ref := metav1.GetControllerOf(p); ref == nil || ref.Kind != "StatefulSet" {
			return fmt.Errorf("pod controller %+v", ref)
		}
		sts := &appsv1.StatefulSet{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(s), sts); err != nil {
			return err
		}
		if !metav1.IsControlledBy(sts, cur) {
			return fmt.Errorf("StatefulSet controller %+v, want the new session %s", metav1.GetControllerOf(sts), cur.UID)
		}
		return nil
	})
	newPod := pod(t, ns, name)
	eventually(t, 30*time.Second, "the new pod's runtime takes turns", func() error {
		if len(turnsOn(t, newPod.UID)) == 0 {
			return fmt.Errorf("no turn on pod %s yet", newPod.UID)
		}
		return nil
	})
	if len(reapedEvents(t, ns)) == 0 {
		t.Error("no OrphanReaped Event recorded")
	}
}
