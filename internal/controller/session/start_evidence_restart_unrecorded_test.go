package session

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Guarantees 1 and 3 of issue 21: a runtime that has reported from a pod
// since its container last terminated is not judged failed, and evidence
// that a runtime started, once seen, is recorded at once, on every path
// that writes nothing for a while (settle waits).
//
// The scenario: alice's stale pod waits for a place in the wave. Its
// runtime container crashed on its first run before it ever reported
// (a dependency not up yet), so the controller holds no record of a start
// (status.startedPodUID empty). The kubelet restarted it after its
// back-off; the restarted runtime published Serving (startedAt after the
// termination) and accepted a turn, while the kubelet still shows
// CrashLoopBackOff with the termination (it publishes the restart late).
// The controller sees exactly that (a new leader after a failover, or a
// busy queue, first looks at alice now).
//
// RecordStart writes at once "a report naming the pod while the kubelet
// shows no start, or one written after a termination the record predates
// while the kubelet still shows the container backing off". Here the
// kubelet shows a start (a restart, a termination), and there is no record
// at all, so renewsRecord, which requires a record of this pod, is false:
// RecordStart says the write may wait. WaitingForWave is a passing state,
// so the settle writes nothing for SettleDelay, and the report is the only
// evidence. A write replacing status.runtime in that window (an admin's,
// the previous pod's runtime's delayed last report) erases it; the next
// reconcile finds a pod backing off, no report and no record since the
// termination, judges it PodFailed, commits and deletes it under the turn
// its restarted runtime accepted.
func TestRestartedRuntimeWithNoRecordYetSurvivesAnOverwrittenReport(t *testing.T) {
	crashed := t0.Add(-15 * time.Second)
	w := newWorld(t, interceptor.Funcs{}, func(s *lullv1.Session, pod *corev1.Pod) {
		pod.Status.ContainerStatuses[0] = crashLooping(lullv1.RuntimeContainerName, 1, 1, crashed)
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, State: lullv1.RuntimeServing, ActiveTurns: 1,
			StartedAt: &metav1.Time{Time: t0.Add(-2 * time.Second)}}
	})
	// Not admitted yet: the stale session waits for a place in the wave
	// (a passing state, whose write settles).
	notAdmitted(t, w)

	if _, err := w.reconcile(); err != nil { // sees the restarted runtime's report
		t.Fatal(err)
	}
	recorded := w.session().Status.StartedPodUID
	w.clock.SetTime(t0.Add(time.Second))
	overwriteReport(t, w, &lullv1.RuntimeReport{PodUID: "pod-0", State: lullv1.RuntimeDrained})
	for range 3 {
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	s := w.session()
	if !w.podExists() || s.Status.Replacement != nil {
		t.Fatalf("pod deleted (replacement %+v; record after the reconcile that saw the report: %q) after status.runtime was overwritten: "+
			"its restarted runtime reported from the pod after the termination and holds a turn", s.Status.Replacement, recorded)
	}
}
