package session

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// A NeverStarted commitment lapses as soon as a runtime report names the
// pod (rollout.NeverStarted turns false on the report alone), and the
// runtime, no longer held, reopens. But the delete that goes with the
// commitment carries only the pod's UID and resourceVersion as
// preconditions, and a report changes the Session, not the pod: while the
// kubelet has not yet published the runtime container's Running state, the
// pod is exactly as it was observed, and that delete still lands.
//
//  1. The stale pod alice-0 is Pending, its runtime container never
//     started, no report names it. Leader A commits
//     status.replacement = {pod-1, NeverStarted} and sends
//     DELETE alice-0 {uid pod-1, resourceVersion P} — and pauses (GC, VM
//     stall) before the request reaches the API server.
//  2. The runtime starts, sees the commitment (held), reports Serving
//     naming its pod.
//  3. Leader B reconciles: the report means "not NeverStarted", the pod is
//     not failed, so the commitment lapses: status.replacement is cleared
//     and a drain request issued. The runtime's hold is lifted; it reopens
//     and accepts a turn (a drain request then lets that turn finish).
//  4. Leader A's DELETE arrives: the pod's resourceVersion is still P (the
//     kubelet has not written Running yet), so the pod holding the turn is
//     deleted, with no Drained report and no standing commitment.
//
// The docs claim this window closed ("Together these close the one window
// no delete precondition can"). A commitment must not lapse while a delete
// made for it can still land.
func TestLapsedNeverStartedCommitmentCannotStillDeleteThePod(t *testing.T) {
	var first atomic.Bool
	paused, resume := make(chan struct{}), make(chan struct{})
	w := newWorld(t, interceptor.Funcs{
		Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
			if first.CompareAndSwap(false, true) {
				close(paused)
				<-resume // leader A stalls with its delete in flight
			}
			return c.Delete(ctx, o, opts...)
		},
	}, func(s *lullv1.Session, pod *corev1.Pod) {
		pod.Status = corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
			Name: lullv1.RuntimeContainerName, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}}
	})
	leaderB := &Reconciler{Client: w.c, APIReader: w.c, Recorder: w.events, Clock: w.clock}

	done := make(chan error, 1)
	go func() { _, err := w.reconcile(); done <- err }() // leader A
	select {
	case <-paused:
	case <-time.After(5 * time.Second):
		t.Fatal("leader A never tried to delete the never-started pod")
	}
	if c := w.session().Status.Replacement; c == nil || c.Reason != lullv1.ReplacementNeverStarted {
		t.Fatalf("replacement = %+v, want the NeverStarted commitment written before the delete", c)
	}

	// 2. The runtime reports Serving, naming its pod (its own status write).
	report := &lullv1.Session{}
	if err := w.c.Get(context.Background(), w.key, report); err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"status":{"runtime":{"podUID":"` + string(w.podUID) + `","state":"Serving","activeTurns":0}}}`)
	if err := w.c.Status().Patch(context.Background(), report, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}

	// 3. Leader B.
	w.clock.SetTime(t0.Add(2 * time.Second))
	if _, err := leaderB.Reconcile(context.Background(), ctrl.Request{NamespacedName: w.key}); err != nil {
		t.Fatal(err)
	}
	lapsed := w.session().Status.Replacement == nil
	// The runtime now holds no more and reopens; a turn is accepted.

	// 4. Leader A's delete lands.
	close(resume)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if lapsed {
		t.Fatalf("leader B lapsed the NeverStarted commitment (releasing the runtime's hold) while leader A's delete "+
			"of pod %s could still land", w.podUID)
	}
	if w.podExists() {
		t.Fatal("the committed pod was not deleted")
	}
}
