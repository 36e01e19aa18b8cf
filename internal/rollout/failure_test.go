package rollout

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// crashLooping is the runtime container in CrashLoopBackOff, its last run
// ended at finished (zero: the kubelet shows no termination).
func crashLooping(finished time.Time) corev1.ContainerStatus {
	c := waiting("CrashLoopBackOff")
	c.RestartCount = 3
	if !finished.IsZero() {
		c.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, FinishedAt: metav1.NewTime(finished)}
	}
	return c
}

// A crash-looping runtime container whose kubelet status lags: the kubelet
// has restarted it and its runtime has reported (and may hold a turn), but
// the pod still shows CrashLoopBackOff. A report the API server saw written
// after the container last terminated proves a live runtime: the pod is
// not failed, and is drained like any other. A report from before the
// termination (the previous run, even within the same second) proves
// nothing: the pod is failed and replaced at once.
func TestReportFresherThanFailureKeepsThePod(t *testing.T) {
	finished := now.Add(-20 * time.Second)
	serving := func(o *Observed, written time.Time) {
		o.Session.Status.Runtime = report(podUID, "", lullv1.RuntimeServing, 1)
		o.ReportWrittenAt = written
	}
	failed := committed(podUID, lullv1.ReplacementPodFailed, "")
	drainReq := func() *lullv1.DrainRequest { return requested(podUID, newRev, 1, now) }
	runDecideTable(t, []decideCase{
		{name: "a report written after the last termination: drained, not failed",
			edit: func(o *Observed) {
				o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{crashLooping(finished)}
				serving(o, finished.Add(10*time.Second))
			}, kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: drainReq},
		{name: "a report written a second after the last termination: drained, not failed",
			edit: func(o *Observed) {
				o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{crashLooping(finished)}
				serving(o, finished.Add(time.Second))
			}, kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: drainReq},
		{name: "a report of the previous run, before it crashed: failed",
			edit: func(o *Observed) {
				o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{crashLooping(finished)}
				serving(o, finished.Add(-5*time.Second))
			}, kind: Commit, why: lullv1.ReasonPodFailed, commit: failed},
		{name: "a report of the previous run in the second it crashed: failed",
			edit: func(o *Observed) {
				o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{crashLooping(finished)}
				serving(o, finished)
			}, kind: Commit, why: lullv1.ReasonPodFailed, commit: failed},
		{name: "a fresh report of another pod proves nothing of this one: failed",
			edit: func(o *Observed) {
				o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{crashLooping(finished)}
				serving(o, now)
				o.Session.Status.Runtime.PodUID = "pod-0"
			}, kind: Commit, why: lullv1.ReasonPodFailed, commit: failed},
		{name: "no termination shown and a report of this pod: the order is unknown, drained",
			edit: func(o *Observed) {
				o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{crashLooping(time.Time{})}
				serving(o, now.Add(-time.Minute))
			}, kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: drainReq},
		{name: "a report of this pod whose write time is unknown: the order is unknown, drained",
			edit: func(o *Observed) {
				o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{crashLooping(finished)}
				serving(o, time.Time{})
			}, kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: drainReq},
		{name: "no report at all: failed",
			edit: func(o *Observed) {
				o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{crashLooping(finished)}
			}, kind: Commit, why: lullv1.ReasonPodFailed, commit: failed},
		{name: "a terminal pod is failed, whatever its runtime reported",
			edit: func(o *Observed) {
				o.Pod.Status.Phase = corev1.PodFailed
				serving(o, now)
			}, kind: Commit, why: lullv1.ReasonPodFailed, commit: failed},
		{name: "under Passive, a live runtime in a lagging crash loop is left alone",
			edit: func(o *Observed) {
				o.Policy.Strategy = lullv1.UpdateStrategyPassive
				o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{crashLooping(finished)}
				serving(o, finished.Add(10*time.Second))
			}, kind: Wait, why: lullv1.ReasonUpdatePending},
	})
}

// The controller's record of a start it saw (status.startedPodUID) is
// evidence a write to status.runtime cannot erase: a pod it names is never
// judged never started, nor failed on a back-off the kubelet shows before
// any termination. A record of another pod proves nothing of this one.
func TestRecordedStartIsEvidenceNoReportCanErase(t *testing.T) {
	drainReq := func() *lullv1.DrainRequest { return requested(podUID, newRev, 1, now) }
	runDecideTable(t, []decideCase{
		{name: "still creating, report overwritten, start recorded: drained",
			edit: func(o *Observed) {
				o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("ContainerCreating")}
				o.Session.Status.StartedPodUID = podUID
				o.Session.Status.Runtime = report("pod-0", "", lullv1.RuntimeServing, 0)
			}, kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: drainReq},
		{name: "image pull back-off before any start shown, report removed, start recorded: drained",
			edit: func(o *Observed) {
				o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("ImagePullBackOff")}
				o.Session.Status.StartedPodUID = podUID
			}, kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: drainReq},
		{name: "still creating, a start recorded for the previous pod: never started",
			edit: func(o *Observed) {
				o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("ContainerCreating")}
				o.Session.Status.StartedPodUID = "pod-0"
			}, kind: Commit, why: lullv1.ReasonNeverStarted, commit: committed(podUID, lullv1.ReplacementNeverStarted, "")},
		{name: "a recorded start does not outweigh a termination the report predates: failed",
			edit: func(o *Observed) {
				o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{crashLooping(now.Add(-20 * time.Second))}
				o.Session.Status.StartedPodUID = podUID
				before := metav1.NewTime(now.Add(-time.Minute))
				o.Session.Status.StartedReportTime, o.Session.Status.StartedRunTime = &before, &before
			}, kind: Commit, why: lullv1.ReasonPodFailed, commit: committed(podUID, lullv1.ReplacementPodFailed, "")},
		{name: "a recorded start that cannot be ordered against the termination is taken as live, as its report was: drained",
			edit: func(o *Observed) {
				o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{crashLooping(now.Add(-20 * time.Second))}
				o.Session.Status.StartedPodUID = podUID // neither time: its report had no startedAt and no write time shown
			}, kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: drainReq},
	})
}

// NextStatus records a start seen in the report, keeps the record while
// the pod is the session's whatever the report says later, and drops it
// with the pod. RecordStart asks for the write at once only while the
// report is the only evidence (the kubelet does not show the start).
func TestNextStatusRecordsTheStartSeen(t *testing.T) {
	f := newFixture()
	f.o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("ContainerCreating")}
	f.o.Session.Status.Runtime = report(podUID, "", lullv1.RuntimeServing, 1)
	if !RecordStart(f.o) {
		t.Error("RecordStart = false for a start seen only in the report")
	}
	st := nextStatus(f.o, decide(f.o))
	if st.StartedPodUID != podUID {
		t.Fatalf("startedPodUID = %q, want %q from the report", st.StartedPodUID, podUID)
	}
	f.o.Session.Status = st
	f.o.Session.Status.Runtime = nil
	if RecordStart(f.o) {
		t.Error("RecordStart = true for a start already recorded")
	}
	if got := nextStatus(f.o, decide(f.o)).StartedPodUID; got != podUID {
		t.Errorf("startedPodUID = %q after the report was removed, want it kept", got)
	}
	f.o.Pod = nil
	if got := nextStatus(f.o, decide(f.o)).StartedPodUID; got != "" {
		t.Errorf("startedPodUID = %q once the pod is gone, want none", got)
	}
	g := newFixture()
	g.o.Session.Status.Runtime = report(podUID, "", lullv1.RuntimeServing, 1)
	if RecordStart(g.o) {
		t.Error("RecordStart = true while the kubelet shows the runtime running: the record can wait for the next write")
	}
	// A replacement's new pod, not yet started, while the record still
	// names the pod it replaced: there is no start to record, and dropping
	// the old record rides on the next write (each replaced session would
	// otherwise pay a status write for it).
	h := newFixture()
	h.o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("ContainerCreating")}
	h.o.Session.Status.StartedPodUID = "pod-0"
	h.o.Session.Status.Runtime = report("pod-0", "", lullv1.RuntimeDrained, 0)
	if RecordStart(h.o) {
		t.Error("RecordStart = true for a new pod with no start seen: only the old pod's record would be dropped")
	}
}

// A restarted runtime's report, seen while the kubelet still shows the
// crash-loop back-off, renews the record's report time, so an overwrite of
// status.runtime before the kubelet publishes the restart does not make
// the pod failed. A record no later than the termination proves nothing.
func TestRecordedRestartOutlivesAnOverwrittenReport(t *testing.T) {
	finished := now.Add(-20 * time.Second)
	at := func(t time.Time) *metav1.Time { return &metav1.Time{Time: t} }
	drainReq := func() *lullv1.DrainRequest { return requested(podUID, newRev, 1, now) }
	runDecideTable(t, []decideCase{
		{name: "report overwritten, record after the termination: drained",
			edit: func(o *Observed) {
				o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{crashLooping(finished)}
				o.Session.Status.StartedPodUID, o.Session.Status.StartedReportTime = podUID, at(finished.Add(10*time.Second))
				o.Session.Status.Runtime = report("pod-0", "", lullv1.RuntimeServing, 0)
			}, kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: drainReq},
		{name: "report overwritten, record of the run that crashed: failed",
			edit: func(o *Observed) {
				o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{crashLooping(finished)}
				o.Session.Status.StartedPodUID, o.Session.Status.StartedReportTime = podUID, at(finished)
			}, kind: Commit, why: lullv1.ReasonPodFailed, commit: committed(podUID, lullv1.ReplacementPodFailed, "")},
	})

	f := newFixture()
	f.o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{crashLooping(finished)}
	f.o.Session.Status.StartedPodUID, f.o.Session.Status.StartedReportTime = podUID, at(finished.Add(-time.Minute))
	f.o.Session.Status.Runtime = report(podUID, "", lullv1.RuntimeServing, 1)
	f.o.ReportWrittenAt = finished.Add(10 * time.Second)
	if !RecordStart(f.o) {
		t.Error("RecordStart = false for a restart seen only in the report while the kubelet shows the back-off")
	}
	st := nextStatus(f.o, decide(f.o))
	if st.StartedPodUID != podUID || st.StartedReportTime == nil || !st.StartedReportTime.Time.Equal(f.o.ReportWrittenAt) {
		t.Fatalf("record = %s at %v, want %s at %s", st.StartedPodUID, st.StartedReportTime, podUID, f.o.ReportWrittenAt)
	}
	f.o.Session.Status = st
	f.o.ReportWrittenAt = now // a later report of the same run: the record stays
	if RecordStart(f.o) {
		t.Error("RecordStart = true for a record that already shows the restart")
	}
	if got := nextStatus(f.o, decide(f.o)).StartedReportTime; !got.Time.Equal(finished.Add(10 * time.Second)) {
		t.Errorf("record time = %v after a later report of the same run, want it kept at %s", got, finished.Add(10*time.Second))
	}
}
