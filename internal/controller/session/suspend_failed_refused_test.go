package session

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// docs/protocol.md (rule 9): while the catalog refuses the runtime image
// of the StatefulSet's pod template, no replacement the StatefulSet
// controller would create from it is started; "a suspension ... goes on",
// as a suspension scales the pod away and starts none. withholdOnRefusedImage
// exempts every step of a suspended session, so a suspension must indeed
// start none: a failed pod of a suspended session, committed PodFailed,
// was deleted at one replica (the reconcile's StatefulSet write came
// before the step), and the StatefulSet controller recreated it from the
// refused image as soon as it was gone, unless lull's next reconcile
// scaled the StatefulSet to zero first: a race lull loses whenever that
// reconcile is late (a controller restart right after the delete, a busy
// queue, a lagging pod cache). Now every committed pod of a suspended
// session is scaled away (rollout.Replicas), never deleted.
//
// Here a suspended session's pod crash-loops, and the catalog refuses
// example.com/agent:2, the image its StatefulSet holds. The test records
// the StatefulSet's replicas on the API server at the moment of any
// delete of the pod: at 1, the StatefulSet controller makes a successor
// on the refused image. (Found by the fifth review, which committed this
// test failing.)
func TestASuspendedSessionsFailedPodIsNotDeletedWhileItsStatefulSetWouldRecreateItOnARefusedImage(t *testing.T) {
	var atDelete []int32
	funcs := apiServerStatefulSets(nil)
	funcs.Delete = func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
		if _, ok := o.(*corev1.Pod); ok {
			sts := &appsv1.StatefulSet{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "alice"}, sts); err == nil {
				atDelete = append(atDelete, ptr.Deref(sts.Spec.Replicas, 1))
			}
		}
		return c.Delete(ctx, o, opts...)
	}
	w := newWorld(t, funcs, func(s *lullv1.Session, pod *corev1.Pod) {
		s.Spec.Suspend = true
		pod.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
	})
	createCatalog(t, w, "3")

	_, _ = w.reconcile() // commits the failure
	_, _ = w.reconcile() // scales it away

	if replicas := ptr.Deref(w.statefulSet().Spec.Replicas, 1); replicas != 0 {
		t.Errorf("StatefulSet alice at %d replica(s) after the suspended session's failed pod was committed, want 0: the pod is scaled away", replicas)
	}
	for _, replicas := range atDelete {
		if replicas != 0 {
			t.Errorf("pod alice-0 deleted while StatefulSet alice, which holds %s (refused by the catalog), is at %d replica(s): the StatefulSet controller recreates the pod on the refused image unless lull's next reconcile scales it to zero first",
				runtimeImage(w.statefulSet()), replicas)
		}
	}
}
