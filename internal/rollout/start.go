// The controller's record of a runtime start it has seen
// (status.startedPodUID, status.startedReportTime, status.startedRunTime):
// evidence that a later
// write to status.runtime cannot erase.

package rollout

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// startSeen reports whether the session's status shows that the pod's
// runtime has started: its report names the pod, or the controller
// recorded a start of it (status.startedPodUID).
func startSeen(pod *corev1.Pod, st lullv1.SessionStatus) bool {
	return st.StartedPodUID == pod.UID || (st.Runtime != nil && st.Runtime.PodUID == pod.UID)
}

// kubeletShowsStart reports whether the kubelet's status shows that the
// pod's runtime container has run: a running or terminated state, now or
// before, or a restart. The kubelet never takes that back, so it needs no
// record; it may publish it late.
func kubeletShowsStart(pod *corev1.Pod) bool {
	c := runtimeStatus(pod)
	return c != nil && (c.RestartCount > 0 || c.State.Running != nil || c.State.Terminated != nil ||
		c.LastTerminationState.Running != nil || c.LastTerminationState.Terminated != nil)
}

// RecordStart reports whether o's status write must not wait: the
// session's report is the only evidence that its pod's runtime runs, so a
// write to status.runtime could erase it, and the controller has not
// recorded it yet. That is a report naming the pod while the kubelet shows
// no start, or one written after a termination no record holds while
// the kubelet still shows the container backing off (a restart it has not
// yet published), whether the record is of an earlier run or there is
// none (the runtime crashed before it ever reported), and the same for the
// drain sidecar's restart (sidecarRestartUnrecorded); and, for a pod behind
// the drain sidecar, its first report, the only evidence that the sidecar
// speaks for the pod. Otherwise the record rides on the next status write
// that happens anyway, and so does dropping the record of a pod that is
// no longer the session's: it is evidence of nothing about its successor.
func RecordStart(o Observed) bool {
	pod := o.Pod
	if pod == nil {
		return false
	}
	rec := startRecordOf(o)
	st := o.Session.Status
	if rec.PodUID == "" || (rec.PodUID == st.StartedPodUID && equality.Semantic.DeepEqual(rec.ReportTime, st.StartedReportTime) &&
		equality.Semantic.DeepEqual(rec.RunTime, st.StartedRunTime)) {
		return false
	}
	if sidecarStatus(pod) != nil && st.StartedPodUID != pod.UID {
		// Behind the drain sidecar, only a report naming the pod shows
		// that the sidecar speaks for it (SidecarHolds), whatever the
		// kubelet shows of the runtime container.
		return true
	}
	return !kubeletShowsStart(pod) || (unrecordedRestart(o) && backingOff(pod)) || sidecarRestartUnrecorded(o)
}

// WithStartRecord is the session's status with the record of a start o
// shows (startRecordOf) and nothing else changed: what a reconcile that
// ends before its status write (an error, a step decided again) writes
// when RecordStart says the record must not wait.
func WithStartRecord(o Observed) lullv1.SessionStatus {
	st := *o.Session.Status.DeepCopy()
	rec := startRecordOf(o)
	st.StartedPodUID, st.StartedReportTime, st.StartedRunTime = rec.PodUID, rec.ReportTime, rec.RunTime
	return st
}

// startRecord is the controller's record of a start: status.startedPodUID,
// status.startedReportTime and status.startedRunTime.
type startRecord struct {
	PodUID     types.UID
	ReportTime *metav1.Time
	RunTime    *metav1.Time
}

// startRecordOf returns the record of a start o's status must hold: the pod,
// once its report has been seen (kept while it is the session's pod), and
// the write time and run start of the report it rests on (see
// SessionStatus.StartedReportTime, StartedRunTime); all empty when no
// start is seen.
func startRecordOf(o Observed) startRecord {
	pod, st := o.Pod, o.Session.Status
	if pod == nil || !startSeen(pod, st) {
		return startRecord{}
	}
	rec := startRecord{PodUID: pod.UID, ReportTime: st.StartedReportTime, RunTime: st.StartedRunTime}
	if st.StartedPodUID != pod.UID {
		rec.ReportTime, rec.RunTime = nil, nil
		if r := st.Runtime; r != nil && r.PodUID == pod.UID {
			rec.ReportTime, rec.RunTime = reportTimes(o)
		}
	}
	if renewsRecord(o) {
		rec.ReportTime, rec.RunTime = reportTimes(o)
	}
	return rec
}

// reportTimes returns the times of o's report a record rests on: when the
// API server saw it written, to the second (nil if that is not shown), and
// its startedAt (nil if it carries none).
func reportTimes(o Observed) (*metav1.Time, *metav1.Time) {
	var written, run *metav1.Time
	if !o.ReportWrittenAt.IsZero() {
		written = &metav1.Time{Time: o.ReportWrittenAt.Truncate(time.Second)}
	}
	if s := o.Session.Status.Runtime.StartedAt; s != nil {
		run = &metav1.Time{Time: s.Truncate(time.Second)}
	}
	return written, run
}

// renewsRecord reports whether the session's report is evidence of a
// restarted runtime or drain sidecar (unrecordedRestart,
// sidecarRestartUnrecorded) that the record, recorded for the pod, does
// not hold yet.
func renewsRecord(o Observed) bool {
	return o.Session.Status.StartedPodUID == o.Pod.UID && (unrecordedRestart(o) || sidecarRestartUnrecorded(o))
}

// unrecordedRestart reports whether the session's report, naming its pod
// and from a run after the runtime container's last termination
// (reportMaySince), or one that cannot be ordered as the kubelet shows no
// termination time, is evidence the record does not hold: there is no
// record of the pod (its runtime crashed before it ever reported, or the
// record is the previous pod's), or one from a run no later than that
// termination (recordSince).
func unrecordedRestart(o Observed) bool {
	pod, st := o.Pod, o.Session.Status
	r := st.Runtime
	if r == nil || r.PodUID != pod.UID {
		return false
	}
	finished, terminated := lastTermination(runtimeStatus(pod))
	if !terminated {
		// No termination time shown (none, or one the kubelet lost track
		// of: ContainerStatusUnknown has no finishedAt): the report cannot
		// be ordered against it and is taken as live
		// (reportedSinceTermination); it is evidence the record does not
		// hold when there is no record of the pod.
		return st.StartedPodUID != pod.UID
	}
	if !reportMaySince(pod, r, o.ReportWrittenAt, finished) {
		return false
	}
	return st.StartedPodUID != pod.UID || !recordSince(pod, st, finished)
}

// sidecarRestartUnrecorded reports whether the session's report, naming
// its pod and written after its drain sidecar's last termination while the
// kubelet shows the sidecar not running, is evidence of a restarted
// sidecar (SidecarHolds) that the record does not hold: there is no
// record of the pod, or it rests on a report written no later than that
// termination.
func sidecarRestartUnrecorded(o Observed) bool {
	pod, st := o.Pod, o.Session.Status
	c, r := sidecarStatus(pod), st.Runtime
	if c == nil || c.State.Running != nil || r == nil || r.PodUID != pod.UID {
		return false
	}
	finished, terminated := lastTermination(c)
	if !terminated || !runSince(pod, nil, o.ReportWrittenAt, finished) {
		return false
	}
	return st.StartedPodUID != pod.UID || st.StartedReportTime == nil || !runSince(pod, nil, st.StartedReportTime.Time, finished)
}
