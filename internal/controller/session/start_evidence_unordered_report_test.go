package session

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Guarantees 1 and 3 of issue 21: a runtime that may have reported from a
// pod since its container last terminated is not judged failed ("a
// report that may be live is never taken for a dead one",
// reportedSinceTermination), and that evidence, once seen, is recorded
// by the controller and cannot be erased by a later write to
// status.runtime.
//
// The scenario: alice's stale pod runs an older runtime, whose report
// carries no startedAt, and the write time of its report is not shown
// (no managed-fields entry owns status.runtime: they were stripped, or
// the report predates them). The runtime container crashed; the kubelet
// restarted it and still shows CrashLoopBackOff with the termination. The
// report names the pod, Serving with a turn. It cannot be ordered against
// the termination, so PodFailure takes it for a live one: the pod is not
// failed, and waits for a place in the wave (a passing state: nothing is
// written for SettleDelay).
//
// RecordStart asks for no write (the kubelet shows a start, and
// unrecordedRestart needs a report it can order after the termination),
// and the record the next write would carry (startedPodUID, with neither
// a report time nor a run time) cannot be ordered either, so
// reportedSinceTermination does not count it. A write then replaces
// status.runtime (the previous pod's runtime's delayed last report): the
// pod is judged failed on the kubelet's back-off alone, committed
// PodFailed and deleted, under the turn the report showed.
func TestUnorderedReportOfARestartedRuntimeSurvivesAnOverwrite(t *testing.T) {
	crashed := t0.Add(-15 * time.Second)
	w := newWorld(t, interceptor.Funcs{}, func(s *lullv1.Session, pod *corev1.Pod) {
		pod.Status.ContainerStatuses[0] = crashLooping(lullv1.RuntimeContainerName, 1, 1, crashed)
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, State: lullv1.RuntimeServing, ActiveTurns: 1}
	})
	notAdmitted(t, w) // not admitted yet
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if !w.podExists() || w.session().Status.Replacement != nil {
		t.Fatal("setup: the pod whose report cannot be ordered against its termination is replaced before any overwrite")
	}

	w.clock.SetTime(t0.Add(time.Second))
	overwriteReport(t, w, &lullv1.RuntimeReport{PodUID: "pod-0", State: lullv1.RuntimeDrained})
	for range 3 {
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	if s := w.session(); !w.podExists() || s.Status.Replacement != nil {
		t.Fatalf("pod deleted (replacement %+v; record %q) after status.runtime was overwritten: its report, which may be live, was seen and showed a turn",
			s.Status.Replacement, s.Status.StartedPodUID)
	}
}
