package rollout

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// A report that says when its process started (status.runtime.startedAt,
// the node's clock) is ordered against the runtime container's last
// termination on that clock alone: a process started after it is the
// restarted runtime's (not failed), one started in its second or before
// is the crashed run's (failed). Neither the node's skew against the API
// server nor a kubelet status write after the report changes that.
func TestReportStartOrdersTheReportOnTheNodesClock(t *testing.T) {
	crashed := now.Add(-30 * time.Second) // API server's clock
	for _, skew := range []time.Duration{-10 * time.Second, 0, 15 * time.Second} {
		finished := crashed.Add(skew) // node's clock
		for _, c := range []struct {
			name       string
			started    time.Time // node's clock
			written    time.Time // API server's clock
			wantFailed bool
		}{
			{"restarted out of the back-off", finished.Add(10 * time.Second), crashed.Add(11 * time.Second), false},
			{"started a second after the crash", finished.Add(time.Second), crashed.Add(2 * time.Second), false},
			{"the crashed run, reported 3 s before its crash", finished.Add(-time.Minute), crashed.Add(-3 * time.Second), true},
			{"the crashed run, started in the crash's second", finished.Truncate(time.Second), crashed.Add(-time.Second), true},
		} {
			t.Run(fmt.Sprintf("%s, node %s ahead", c.name, skew), func(t *testing.T) {
				f := newFixture()
				f.o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{crashLooping(finished)}
				// The kubelet's one entry, written after every report here
				// (another container's readiness): it orders nothing.
				f.o.Pod.ManagedFields = []metav1.ManagedFieldsEntry{
					{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", Time: &metav1.Time{Time: crashed.Add(20 * time.Second)}, FieldsV1: containerStatusesFields},
				}
				f.o.Session.Status.Runtime = report(podUID, "", lullv1.RuntimeServing, 1)
				f.o.Session.Status.Runtime.StartedAt = &metav1.Time{Time: c.started}
				f.o.ReportWrittenAt = c.written
				if failed, why := PodFailure(f.o.Pod, f.o.Session.Status, f.o.ReportWrittenAt); failed != c.wantFailed {
					t.Errorf("PodFailure = %v (%s), want %v", failed, why, c.wantFailed)
				}
			})
		}
	}
}

// A report without startedAt (an older runtime, the drain sidecar) is
// still ordered by its write time, on the API server's clock or across
// clocks: a report written after the kubelet published the termination
// keeps the pod, whatever the node's clock.
func TestReportWithoutStartIsOrderedByItsWriteTime(t *testing.T) {
	crashed := now.Add(-30 * time.Second)
	f := newFixture()
	f.o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{crashLooping(crashed.Add(15 * time.Second))}
	f.o.Pod.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", Time: &metav1.Time{Time: crashed}, FieldsV1: containerStatusesFields},
	}
	f.o.Session.Status.Runtime = report(podUID, "", lullv1.RuntimeServing, 1)
	f.o.ReportWrittenAt = crashed.Add(11 * time.Second)
	if failed, why := PodFailure(f.o.Pod, f.o.Session.Status, f.o.ReportWrittenAt); failed {
		t.Errorf("a report without startedAt written 11 s after the crash was published is judged failed: %s", why)
	}
	f.o.ReportWrittenAt = crashed.Add(-3 * time.Second)
	if failed, _ := PodFailure(f.o.Pod, f.o.Session.Status, f.o.ReportWrittenAt); !failed {
		t.Error("a report without startedAt written before the crash, on both clocks, is not judged failed")
	}
}

// The controller's record of a start keeps the run start of the report it
// rests on (status.startedRunTime), and is judged by it as the report is:
// an overwritten report does not bring back the two-clock order.
func TestRecordedRunStartOrdersTheRecord(t *testing.T) {
	crashed := now.Add(-20 * time.Second)
	const skew = -10 * time.Second // node behind the API server
	finished := crashed.Add(skew)
	at := func(t time.Time) *metav1.Time { return &metav1.Time{Time: t} }
	drainReq := func() *lullv1.DrainRequest { return requested(podUID, newRev, 1, now) }
	crashedPod := func(o *Observed) {
		o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{crashLooping(finished)}
		o.Pod.ManagedFields = []metav1.ManagedFieldsEntry{
			{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", Time: &metav1.Time{Time: now}, FieldsV1: containerStatusesFields},
		}
	}
	runDecideTable(t, []decideCase{
		{name: "record of the run that crashed 3 s after its report, node behind: failed",
			edit: func(o *Observed) {
				crashedPod(o)
				o.Session.Status.StartedPodUID = podUID
				o.Session.Status.StartedReportTime, o.Session.Status.StartedRunTime = at(crashed.Add(-3*time.Second)), at(finished.Add(-time.Minute))
			}, kind: Commit, why: lullv1.ReasonPodFailed, commit: committed(podUID, lullv1.ReplacementPodFailed, "")},
		{name: "record of the restarted run, report overwritten, kubelet wrote since: drained",
			edit: func(o *Observed) {
				crashedPod(o)
				o.Session.Status.StartedPodUID = podUID
				o.Session.Status.StartedReportTime, o.Session.Status.StartedRunTime = at(crashed.Add(11*time.Second)), at(finished.Add(10*time.Second))
				o.Session.Status.Runtime = report("pod-0", "", lullv1.RuntimeServing, 0)
			}, kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: drainReq},
	})
}

// NextStatus records the report's startedAt with the start it records,
// and renews both when a report's run started after the last termination
// while the record's did not, even when the write times cannot order it
// (the kubelet wrote the pod's status after the report, the node 15 s
// ahead).
func TestRecordKeepsTheReportsRunStart(t *testing.T) {
	const skew = 15 * time.Second
	crashed := now.Add(-11 * time.Second)
	finished := crashed.Add(skew)
	f := newFixture()
	f.o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{crashLooping(finished)}
	f.o.Pod.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", Time: &metav1.Time{Time: now.Add(time.Second)}, FieldsV1: containerStatusesFields},
	}
	first := finished.Add(-time.Hour)
	f.o.Session.Status.StartedPodUID = podUID
	f.o.Session.Status.StartedReportTime = &metav1.Time{Time: crashed.Add(-time.Hour)}
	f.o.Session.Status.StartedRunTime = &metav1.Time{Time: first}
	restarted := finished.Add(10*time.Second + 400*time.Millisecond)
	f.o.Session.Status.Runtime = report(podUID, "", lullv1.RuntimeServing, 1)
	f.o.Session.Status.Runtime.StartedAt = &metav1.Time{Time: restarted}
	f.o.ReportWrittenAt = now
	f.o.Now = now.Add(2 * time.Second)
	if !RecordStart(f.o) {
		t.Error("RecordStart = false for a restart shown only by the report's startedAt while the kubelet shows the back-off")
	}
	st := nextStatus(f.o, decide(f.o))
	if st.StartedRunTime == nil || !st.StartedRunTime.Time.Equal(restarted.Truncate(time.Second)) {
		t.Fatalf("record's run time = %v, want the report's startedAt %s", st.StartedRunTime, restarted.Truncate(time.Second))
	}
	if st.StartedReportTime == nil || !st.StartedReportTime.Time.Equal(now) {
		t.Errorf("record's report time = %v, want the report's write time %s", st.StartedReportTime, now)
	}
	f.o.Session.Status = st
	f.o.Session.Status.Runtime = report("pod-0", "", lullv1.RuntimeServing, 0) // overwritten
	if failed, why := PodFailure(f.o.Pod, f.o.Session.Status, f.o.ReportWrittenAt); failed {
		t.Errorf("a pod whose record shows the restarted run is judged failed once its report is overwritten: %s", why)
	}

	// First seen: the record takes the report's startedAt from the start.
	g := newFixture()
	g.o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("ContainerCreating")}
	g.o.Session.Status.Runtime = report(podUID, "", lullv1.RuntimeServing, 0)
	g.o.Session.Status.Runtime.StartedAt = &metav1.Time{Time: first}
	g.o.ReportWrittenAt = now
	if st := nextStatus(g.o, decide(g.o)); st.StartedRunTime == nil || !st.StartedRunTime.Time.Equal(first) {
		t.Errorf("record's run time = %v for a first report started at %s, want that", st.StartedRunTime, first)
	}
}
