package rollout

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Review round 3, fix A, guarantee 1: a runtime that has reported from
// its pod since its container last terminated is never judged failed.
//
// StatusWrittenAt is the time of the latest status write whose
// managed-fields entry owns status.containerStatuses. A manager's entry
// is the union of every field it ever wrote, and its time moves with any
// write of it that changes anything: the kubelet's entry owns
// containerStatuses for good, so every kubelet status write counts as a
// publication of the runtime's state, whatever it changed. The kubelet
// writes the pod's status for reasons other than the runtime's restart,
// from its cached status: here the mesh proxy's readiness flips (the
// prober's SetContainerReadiness writes at once), a second after the
// restarted runtime reported Serving with a turn open, and the runtime
// container still shows CrashLoopBackOff because PLEG has not yet
// relisted it. StatusWrittenAt moves past the report, the API server's
// clock no longer orders it, and the cross-clock rule is defeated by a
// node clock 15 s ahead (as in
// TestReportFresherThanFailureWhenAnotherPartyWritesThePodStatusAfterIt,
// which the fix made pass only for a manager other than the kubelet). The
// pod is judged failed and replaced without a drain: the turn is lost.
//
// The report now says when its process started, on the node's clock
// (status.runtime.startedAt): after the termination, so it is the
// restarted runtime's, whatever was written since and whatever the skew.
func TestReportFresherThanFailureWhenTheKubeletWritesAnotherContainersStatusAfterIt(t *testing.T) {
	const skew = 15 * time.Second // node ahead of the API server
	crashed := now.Add(-11 * time.Second)
	f := newFixture()
	proxy := running("istio-proxy")
	proxy.Ready = true
	f.o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{crashLooping(crashed.Add(skew)), proxy}
	f.o.Pod.ManagedFields = []metav1.ManagedFieldsEntry{
		// The kubelet's one entry: it published the crash at crashed, and
		// wrote the proxy's readiness a second after the runtime's report.
		{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", Time: &metav1.Time{Time: now.Add(time.Second)}, FieldsV1: containerStatusesFields},
	}
	// The restarted runtime's process started out of the kubelet's
	// 10 s back-off, on the node's clock, and says so in its report.
	f.o.Session.Status.Runtime = report(podUID, "", lullv1.RuntimeServing, 1)
	f.o.Session.Status.Runtime.StartedAt = &metav1.Time{Time: crashed.Add(skew).Add(10 * time.Second)}
	f.o.ReportWrittenAt = now
	f.o.Now = now.Add(2 * time.Second)
	a := decide(f.o)
	if a.Kind == Commit && a.Replacement != nil && a.Replacement.Reason == lullv1.ReplacementPodFailed {
		t.Fatalf("a runtime that reported (a turn open) 11 s after its crash was published is judged failed once the kubelet wrote another container's status after the report: %s", a.Message)
	}
}

// Review round 3, fix A, guarantee 2: a runtime that crashed after its
// last report is judged failed.
//
// reportedSinceTermination takes either clock: the API server's
// (report after StatusWrittenAt) or the cross-clock comparison (report,
// on the API server's clock, after lastState.terminated.finishedAt, on
// the node's). The cross-clock rule is an "or", so a node whose clock is
// behind the API server's makes every termination look older than it
// is. Here the runtime reported Serving, crashed 3 s later and stays in
// CrashLoopBackOff; the kubelet published the crash at once (the API
// server's clock orders it plainly after the report). The node's clock
// is 10 s behind, so finishedAt reads 7 s before the report, and the
// report is taken as written since the termination: the stale pod is not
// judged failed. It is asked to drain, which its crashed runtime cannot
// answer, instead of being replaced at once; and as a crash-looping
// runtime reports on each start before it crashes again, every later
// crash looks older than its report too.
//
// The report now says when its process started, on the node's clock
// (status.runtime.startedAt): before the termination, so it is the
// crashed run's, whatever the skew.
func TestRuntimeThatCrashedAfterItsReportIsFailedWhateverTheNodeClock(t *testing.T) {
	const skew = -10 * time.Second // node behind the API server
	reported := now.Add(-20 * time.Second)
	crashed := reported.Add(3 * time.Second)
	f := newFixture()
	f.o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{crashLooping(crashed.Add(skew))}
	f.o.Pod.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", Time: &metav1.Time{Time: crashed}, FieldsV1: containerStatusesFields},
	}
	// The crashed run's process started a minute before its report, on
	// the node's clock.
	f.o.Session.Status.Runtime = report(podUID, "", lullv1.RuntimeServing, 0)
	f.o.Session.Status.Runtime.StartedAt = &metav1.Time{Time: reported.Add(-time.Minute).Add(skew)}
	f.o.ReportWrittenAt = reported
	if failed, _ := PodFailure(f.o.Pod, f.o.Session.Status, f.o.ReportWrittenAt); !failed {
		t.Errorf("a runtime whose crash the API server saw published 3 s after its last report is not judged failed when the node's clock is 10 s behind")
	}
	if a := decide(f.o); a.Kind != Commit || a.Replacement == nil || a.Replacement.Reason != lullv1.ReplacementPodFailed {
		t.Errorf("the stale crash-looping pod is not replaced at once: %s %s: %s", a.Kind, a.Reason, a.Message)
	}
}
