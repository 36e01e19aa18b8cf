package rollout

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// "A report is fresher than a failure" takes each clock's evidence on its
// own (runSince): a node clock that stepped between the crash and the
// restart does not hide a report the API server's clock alone orders
// after the termination. A node whose clock ran 30 s fast when its
// runtime crashed, and which NTP (or a VM's clock sync after a pause, a
// reboot before NTP) stepped back before the kubelet restarted the
// container 10 s later, stamps the restarted runtime's start 20 s before
// the termination it follows. The kubelet has not published the restart
// yet (its pod still shows CrashLoopBackOff, as it does for up to about a
// second), and the runtime's Serving report, written 11 s after the
// kubelet published the termination on the API server's own clock, is
// the only evidence; the runtime may have accepted a turn. That write
// order says the crashed run cannot have written the report, so the pod
// is not failed and is drained. (Found by the fourth review: while
// startedAt alone decided, the pod was committed PodFailed and deleted
// under the turn its restarted runtime accepted.)
func TestReportFresherThanFailureWhenTheNodeClockSteppedBackBeforeTheRestart(t *testing.T) {
	crashed := now.Add(-30 * time.Second)     // the API server's clock
	finished := crashed.Add(30 * time.Second) // the node's clock, 30 s fast then
	started := crashed.Add(10 * time.Second)  // the node's clock, stepped back to the truth since
	f := newFixture()
	f.o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{crashLooping(finished)}
	// The kubelet published the termination then, and has written nothing since.
	f.o.Pod.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", Time: &metav1.Time{Time: crashed}, FieldsV1: containerStatusesFields},
	}
	f.o.Session.Status.Runtime = report(podUID, "", lullv1.RuntimeServing, 1)
	f.o.Session.Status.Runtime.StartedAt = &metav1.Time{Time: started}
	f.o.ReportWrittenAt = crashed.Add(11 * time.Second)

	if failed, why := PodFailure(f.o.Pod, f.o.Session.Status, f.o.ReportWrittenAt); failed {
		t.Errorf("PodFailure = true (%s) for a report the API server saw written 11 s after the kubelet published the termination, by a runtime holding a turn", why)
	}
	if a := Decide(f.o, Judge(f.o)); a.Kind == Commit || a.Kind == DeletePod {
		t.Errorf("Decide = %s (%s) on a pod whose restarted runtime holds a turn; want a drain", a.Kind, a.Message)
	}
}

// The controller's record of a start is judged as a report is
// (recordSince): a recorded run start that a stepped node clock put before
// the termination does not hide a recorded report the API server saw
// written after the termination was published, once status.runtime has
// been overwritten since.
func TestRecordFresherThanFailureWhenTheNodeClockSteppedBackBeforeTheRestart(t *testing.T) {
	crashed := now.Add(-30 * time.Second)     // the API server's clock
	finished := crashed.Add(30 * time.Second) // the node's clock, 30 s fast then
	started := crashed.Add(10 * time.Second)  // the node's clock, stepped back since
	f := newFixture()
	f.o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{crashLooping(finished)}
	f.o.Pod.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", Time: &metav1.Time{Time: crashed}, FieldsV1: containerStatusesFields},
	}
	f.o.Session.Status.StartedPodUID = podUID
	f.o.Session.Status.StartedReportTime = &metav1.Time{Time: crashed.Add(11 * time.Second)}
	f.o.Session.Status.StartedRunTime = &metav1.Time{Time: started}
	f.o.Session.Status.Runtime = report("pod-0", "", lullv1.RuntimeServing, 0) // overwritten

	if failed, why := PodFailure(f.o.Pod, f.o.Session.Status, f.o.ReportWrittenAt); failed {
		t.Errorf("PodFailure = true (%s) for a recorded report the API server saw written 11 s after the kubelet published the termination", why)
	}
	if a := Decide(f.o, Judge(f.o)); a.Kind == Commit || a.Kind == DeletePod {
		t.Errorf("Decide = %s (%s) on a pod whose record shows the restarted runtime; want a drain", a.Kind, a.Message)
	}

	// Written in the second the termination was published: the record is
	// the crashed run's, on either clock.
	f.o.Session.Status.StartedReportTime = &metav1.Time{Time: crashed}
	if failed, _ := PodFailure(f.o.Pod, f.o.Session.Status, f.o.ReportWrittenAt); !failed {
		t.Error("PodFailure = false for a record whose report was written in the termination's second and whose run started before it")
	}
}
