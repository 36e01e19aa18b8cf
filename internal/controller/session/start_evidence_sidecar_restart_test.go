package session

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Guarantees 1 and 3 of issue 21: a runtime that has reported from a pod
// since its container last terminated is not judged failed, and evidence
// that a runtime started, once seen, is recorded by the controller and
// cannot be erased by a later write to status.runtime.
//
// The scenario: alice's stale pod runs her runtime behind the drain
// sidecar (spec.agent). The sidecar crashed (at sidecarCrashed); the
// kubelet restarted it after its back-off, and the restarted sidecar, as
// it does on every start before it accepts a turn, wrote its report
// (written, after that crash, on the API server's clock) and accepted a
// turn. The kubelet still shows the sidecar in CrashLoopBackOff with the
// crash (it publishes the restart late). The runtime container, which
// depends on the sidecar, crashed after that report (runtimeCrashed) and
// backs off too.
//
// SidecarHolds sees the restarted sidecar in its report (written after
// the sidecar's termination): the pod is drained, not replaced, and the
// drain request is written with the controller's record of the start
// (status.startedPodUID and startedReportTime = written). A write then
// replaces status.runtime (an admin's, or a delayed write of another
// pod's runtime). SidecarHolds reads only the report for a sidecar the
// kubelet shows waiting, never the record, so it now says the sidecar
// does not hold the pod; PodFailure then judges the runtime container on
// the record, which is older than the runtime's crash, and finds it
// failed: the pod is committed PodFailed and deleted without a drain,
// under the turn its restarted sidecar holds. The record held the
// evidence (a report written after the sidecar's crash) and was not
// consulted.
func TestRestartedSidecarHoldingATurnSurvivesAnOverwrittenReport(t *testing.T) {
	sidecarCrashed := t0.Add(-40 * time.Second)
	written := t0.Add(-30 * time.Second) // the restarted sidecar's first report
	runtimeCrashed := t0.Add(-20 * time.Second)
	withWrite := reportWrittenAt(&written)
	w := newWorld(t, withWrite, func(s *lullv1.Session, pod *corev1.Pod) {
		withSidecar(pod)
		pod.Status.InitContainerStatuses[0] = crashLooping(lullv1.AgentContainerName, 1, 1, sidecarCrashed)
		pod.Status.ContainerStatuses[0] = crashLooping(lullv1.RuntimeContainerName, 3, 2, runtimeCrashed)
		// The sidecar's report: no startedAt, as the sidecar writes it.
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, State: lullv1.RuntimeServing, ActiveTurns: 1}
	})
	for range 2 {
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	s := w.session()
	if !w.podExists() || s.Status.Drain == nil || s.Status.Drain.PodUID != w.podUID {
		t.Fatalf("setup: want the pod drained through its restarted sidecar, got pod exists %v, drain %+v, replacement %+v",
			w.podExists(), s.Status.Drain, s.Status.Replacement)
	}
	recorded := s.Status.StartedReportTime

	w.clock.SetTime(t0.Add(time.Second))
	written = t0.Add(time.Second)
	overwriteReport(t, w, nil)
	for range 3 {
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	if s := w.session(); !w.podExists() {
		t.Fatalf("pod deleted (replacement %+v; record %s/%v) after status.runtime was overwritten: its restarted sidecar "+
			"reported from the pod after the sidecar's last termination, and holds a turn", s.Status.Replacement, s.Status.StartedPodUID, recorded)
	}
}
