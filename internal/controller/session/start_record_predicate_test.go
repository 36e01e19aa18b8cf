package session

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/rollout"
)

// Guarantee 3 (review of issue 21): the evidence that a pod's runtime
// started, once seen, is recorded by the controller; docs/protocol.md: the
// record is written at once when the report is the only evidence, as when
// the kubelet still shows the back-off the runtime has restarted from.
//
// The restarted runtime's first report (the SDK's, on every start) is the
// same report as its previous run's but for reportedAt: Serving, no turn,
// no activity yet, nothing expired. The Session watch's predicate
// (decisionInputsChanged) drops such an update as a "rewrite" on the
// premise that "a report is never judged by its age", which the new
// failure and start-record rules break: the write's time (managed fields)
// is now exactly what tells a live restarted runtime from the one that
// crashed. So no reconcile runs for that report, the record is not
// renewed, and the only evidence stays in status.runtime, where the next
// write to status.runtime (an admin's, a stale writer's, while the
// kubelet still shows CrashLoopBackOff) erases it: the reconcile that
// write triggers judges the pod failed (the record predates the
// termination) and deletes it under the turn the runtime has accepted.
func TestRecordedStartRestartReportIsReconciled(t *testing.T) {
	pod := types.UID("pod-1")
	crashed := t0.Add(-20 * time.Second)
	firstReport := crashed.Add(-time.Hour)
	restartReport := t0.Add(-time.Second)
	session := func(reportedAt, written time.Time) *lullv1.Session {
		s := &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice", UID: "alice-uid",
			ManagedFields: []metav1.ManagedFieldsEntry{runtimeWrite(written)}}}
		s.Status.PodUID = pod
		s.Status.StartedPodUID = pod
		s.Status.StartedReportTime = &metav1.Time{Time: firstReport.Truncate(time.Second)}
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod, State: lullv1.RuntimeServing, ReportedAt: &metav1.Time{Time: reportedAt}, RefreshSeconds: 5}
		return s
	}
	old, cur := session(firstReport, firstReport), session(restartReport, restartReport)
	old.ResourceVersion, cur.ResourceVersion = "10", "11"

	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice-0", UID: pod},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: lullv1.RuntimeContainerName, RestartCount: 3,
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, FinishedAt: metav1.NewTime(crashed)}}}}}}
	o := rollout.Observed{Now: t0, Session: cur, Pod: p, ReportWrittenAt: ReportWrittenAt(cur)}
	if !rollout.RecordStart(o) {
		t.Fatal("setup: the restarted runtime's report is not one the record must take at once")
	}
	if !decisionInputsChanged.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: cur}) {
		t.Fatal("the restarted runtime's first report, the only evidence of its start while the kubelet shows CrashLoopBackOff, " +
			"is dropped by the Session watch as a rewrite: no reconcile records it, and a later write to status.runtime erases it")
	}
}
