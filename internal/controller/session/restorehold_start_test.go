package session

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/rollout"
)

// Issue 21, review round 2, guarantee 3 (the evidence that a pod's
// runtime started, once seen, is recorded by the controller and cannot be
// erased by a later write to status.runtime), broken through the
// StatefulSet restore backoff.
//
// A report naming the pod while the kubelet shows no start yet (its status
// lags the container it started) is the only evidence that the runtime
// runs, so RecordStart asks for a status write at once. While a restore
// of a StatefulSet another writer keeps changing back waits, the reconcile
// returns before any status write: the evidence is not recorded. A write
// to status.runtime in that window (an admin's kubectl patch
// --subresource=status, a late report of a previous runtime) erases it,
// and once the restore is allowed the stale pod is judged never started
// and replaced without a drain, its runtime holding a turn.
//
// Now, while the restore waits, the status write that records the start
// is made (heldForRestore).
func TestRestoreBackoffDoesNotDelayRecordingARuntimeStart(t *testing.T) {
	w := startLagWorld(t)
	ctx := context.Background()
	// A writer that changes the StatefulSet back after each restore.
	w.handEdit(privileged)
	w.reconcileOK() // the first restore, at once
	w.handEdit(privileged)
	// The runtime starts and reports, holding a turn; the kubelet has not
	// published the container's start yet.
	s := w.session()
	if s.Status.Replacement != nil || !w.podExists() {
		t.Fatal("precondition: the pod is not replaced during its backoff")
	}
	s.Status.Runtime = &lullv1.RuntimeReport{PodUID: w.podUID, State: lullv1.RuntimeServing, ActiveTurns: 1}
	if err := w.c.Status().Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	res, err := w.reconcile() // the second restore waits 5 s
	if err != nil {
		t.Fatal(err)
	}
	if !isPrivileged(w.statefulSet()) {
		t.Fatal("precondition: the second restore waits")
	}
	if got := w.session().Status.StartedPodUID; got != w.podUID {
		t.Errorf("the runtime's start, seen only in its report, is not recorded while a StatefulSet restore waits (startedPodUID %q)", got)
	}
	// status.runtime overwritten: an admin clearing it.
	s = w.session()
	s.Status.Runtime = nil
	if err := w.c.Status().Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	// The restore's wait and the replacement backoff pass.
	w.clock.SetTime(w.clock.Now().Add(max(res.RequeueAfter, rollout.Backoff(1)) + time.Second))
	w.reconcileOK() // the restore
	observe(t, w)
	w.reconcileOK()
	if !w.podExists() || w.session().Status.Replacement != nil {
		t.Errorf("the pod whose runtime reported (and holds a turn) is replaced as never started: replacement %+v", w.session().Status.Replacement)
	}
}

// startLagWorld is a driftWorld whose stale pod's runtime container the
// kubelet still shows as being created.
func startLagWorld(t *testing.T) *world {
	t.Helper()
	w := newWorld(t, apiServerStatefulSets(nil), func(s *lullv1.Session, pod *corev1.Pod) {
		// A replacement of the session's pod failed just now: the next
		// one that does not drain waits out its backoff.
		s.Status.FailedReplacements = 1
		s.Status.LastFailedReplacementTime = &metav1.Time{Time: t0}
		pod.Status.Phase = corev1.PodPending
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: lullv1.RuntimeContainerName,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
	})
	w.reconcileOK()
	w.eventReasons()
	return w
}
