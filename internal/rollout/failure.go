package rollout

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// unstartable lists the container waiting reasons that mean the container
// cannot start without a new pod: the kubelet's image, config and crash-loop
// back-offs.
var unstartable = map[string]bool{
	"CrashLoopBackOff":           true,
	"ImagePullBackOff":           true,
	"ErrImagePull":               true,
	"ErrImageNeverPull":          true,
	"InvalidImageName":           true,
	"CreateContainerConfigError": true,
	"CreateContainerError":       true,
	"RunContainerError":          true,
}

// PodFailure reports whether a pod holds no runtime that could be serving a
// turn because it is terminal (phase Failed or Succeeded) or its runtime
// container cannot start, and says why. st is the session's status (its
// report, status.runtime, and its record of a start seen,
// status.startedPodUID and startedReportTime) and reportWrittenAt when the
// API server saw the report written (Observed.ReportWrittenAt; zero if
// unknown).
//
// Only the pod phase and the runtime container (lullv1.RuntimeContainerName)
// count. A crash-looping mesh proxy or a native sidecar in ImagePullBackOff
// next to a running runtime does not make the pod failed: that runtime may
// hold turns, and is drained like any other.
//
// A report is fresher than a failure: a container in a back-off whose
// runtime has reported from this pod since the container last terminated
// is not failed (see reportedSinceTermination). The kubelet publishes a
// restarted container's Running state up to about a second after it
// started it, and the runtime may have reported and accepted a turn in
// between. That rule is for a runtime that reports itself; a pod whose
// drain sidecar holds its turns (SidecarHolds) is judged on the kubelet's
// back-off alone, as its sidecar's report says nothing of the runtime
// container, and such a failed pod is drained, not replaced at once
// (Decide).
func PodFailure(pod *corev1.Pod, st lullv1.SessionStatus, reportWrittenAt time.Time) (bool, string) {
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return true, "phase " + string(pod.Status.Phase)
	}
	c := runtimeStatus(pod)
	if c == nil || !backingOff(pod) {
		return false, ""
	}
	if !SidecarHolds(pod, st, reportWrittenAt) && reportedSinceTermination(pod, st, reportWrittenAt) {
		return false, ""
	}
	return true, fmt.Sprintf("container %s: %s", c.Name, c.State.Waiting.Reason)
}

// SidecarHolds reports whether the pod's injected drain sidecar
// (lullv1.AgentContainerName, a native sidecar) is live and speaks for the
// pod: whatever the runtime container's state, the sidecar holds the turns
// begun through it (kept in its state file, with their leases) and answers
// a drain request, Drained once none is held. st is the session's status
// and reportWrittenAt when the API server saw status.runtime written.
//
// The sidecar is live when the kubelet shows it running, or, while the
// kubelet shows it waiting after a termination, when that termination
// shows no time (the kubelet lost the container; the report cannot be
// ordered against it), or when its report names the
// pod and was written after that termination (or the controller's record
// of the start rests on such a report): like the SDK, the sidecar
// writes a report on every start before it accepts a turn, and the kubelet
// publishes its restart late, as it does the runtime container's. It
// speaks for the pod once a report naming the pod has been seen (the
// report, or the controller's record of a start, status.startedPodUID):
// before it, it has accepted no turn, as its gate opens only once its
// Serving report is published.
func SidecarHolds(pod *corev1.Pod, st lullv1.SessionStatus, reportWrittenAt time.Time) bool {
	c := sidecarStatus(pod)
	if c == nil || !startSeen(pod, st) {
		return false
	}
	if c.State.Running != nil {
		return true
	}
	finished, terminated := lastTermination(c)
	if !terminated {
		// A termination shown without a time (ContainerStatusUnknown:
		// the kubelet lost the container) cannot be ordered against the
		// report naming the pod: the report may be the restarted run's,
		// holding the turns of its state file, and is taken as live, as
		// unrecordedRestart takes the runtime container's. Shown waiting
		// with no termination at all, the sidecar has never run (native
		// sidecars start first), so nothing holds.
		return c.LastTerminationState.Terminated != nil
	}
	if r := st.Runtime; r != nil && r.PodUID == pod.UID && runSince(pod, nil, reportWrittenAt, finished) {
		return true
	}
	// The record of the start rests on a report's write time: one written
	// after the sidecar's termination is its restarted run's, whatever has
	// been written to status.runtime since.
	return st.StartedPodUID == pod.UID && st.StartedReportTime != nil && runSince(pod, nil, st.StartedReportTime.Time, finished)
}

// drainsFirst reports whether o's pod is failed by its runtime container's
// back-off while its drain sidecar holds its turns (SidecarHolds): it is
// replaced through a drain the sidecar answers, not without one. A
// terminal pod has no live sidecar, and is failed as any other.
func (o Observed) drainsFirst() bool {
	pod := o.Pod
	if pod == nil || pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return false
	}
	failed, _ := o.podFailure()
	return failed && SidecarHolds(pod, o.Session.Status, o.ReportWrittenAt)
}

// backingOff reports whether the pod's runtime container is waiting in one
// of the back-offs PodFailure judges (unstartable).
func backingOff(pod *corev1.Pod) bool {
	c := runtimeStatus(pod)
	return c != nil && c.State.Waiting != nil && unstartable[c.State.Waiting.Reason]
}

// reportedSinceTermination reports whether the runtime may have reported
// from the pod since its runtime container last terminated: the session's
// report, which the API server saw written at writtenAt, names the pod and
// comes from a run after the container's lastState.terminated.finishedAt
// (reportSince), or the two cannot be ordered (no termination shown, or,
// for a report without startedAt, the write time unknown): a report that
// may be live is never taken for a dead one. The start the controller
// recorded (status.startedPodUID and the report time and run time it
// rests on) counts as such a report, whatever has been written to
// status.runtime since: with no termination shown, and when it is from a
// run after the termination (recordSince).
func reportedSinceTermination(pod *corev1.Pod, st lullv1.SessionStatus, writtenAt time.Time) bool {
	c := runtimeStatus(pod)
	finished, terminated := lastTermination(c)
	if st.StartedPodUID == pod.UID && (!terminated || recordSince(pod, st, finished)) {
		return true
	}
	r := st.Runtime
	if r == nil || r.PodUID != pod.UID {
		return false
	}
	return !terminated || reportMaySince(pod, r, writtenAt, finished)
}

// reportMaySince reports whether report r may come from a run after the
// runtime container's termination at finished: it does (reportSince), or
// the two cannot be ordered, as it carries no startedAt and its write
// time is not shown. A report that may be live is never taken for a dead
// one.
func reportMaySince(pod *corev1.Pod, r *lullv1.RuntimeReport, writtenAt, finished time.Time) bool {
	return (r.StartedAt == nil && writtenAt.IsZero()) || reportSince(pod, r, writtenAt, finished)
}

// reportSince reports whether report r, which the API server saw written
// at writtenAt (zero if unknown), comes from a run of the runtime after
// its container's termination at finished (the node's clock): runSince
// with the report's startedAt.
func reportSince(pod *corev1.Pod, r *lullv1.RuntimeReport, writtenAt, finished time.Time) bool {
	return runSince(pod, r.StartedAt, writtenAt, finished)
}

// recordSince reports whether the controller's record of a start
// (status.startedRunTime, status.startedReportTime) shows a run of the
// runtime after its container's termination at finished, as reportSince
// judges a report: runSince with the recorded run's start and the
// recorded report's write time.
func recordSince(pod *corev1.Pod, st lullv1.SessionStatus, finished time.Time) bool {
	if st.StartedRunTime == nil && st.StartedReportTime == nil {
		// Recorded from a report that could not be ordered either
		// (reportMaySince): it may be live, and so may the record.
		return true
	}
	var written time.Time
	if st.StartedReportTime != nil {
		written = st.StartedReportTime.Time
	}
	return runSince(pod, st.StartedRunTime, written, finished)
}

// runSince reports whether a report from a run that started at started
// (its startedAt, the node's clock; nil if the report does not say), which
// the API server saw written at written (its clock; zero if unknown), comes
// from a run of the runtime after its container's termination at finished
// (the node's clock). All are compared to the second (after).
//
// Each clock's own evidence suffices, as it compares two times on one
// clock:
//
//   - the node's: the run started after finished. The kubelet restarts a
//     container out of a back-off no sooner than the back-off (10 s at
//     least) after it terminated, so a restarted runtime's start is never
//     in the termination's second.
//   - the API server's: the report was written after the API server last
//     saw the pod's container states published (StatusWrittenAt); the
//     termination was published then or earlier, so the run that crashed
//     cannot have written it.
//
// One clock can be wrong where the other is right: a node clock stepped
// back between the crash and the restart (NTP, a VM's clock sync) stamps
// the restarted run's start before finished, and a kubelet write of the
// pod's status for any reason after the report moves StatusWrittenAt past
// it. Neither says the report is older than the crash, only that its own
// clock cannot show it is newer.
//
// Only a report without startedAt (an older runtime, the drain sidecar)
// is also ordered across clocks, its write time against finished, which
// holds while the node's clock is ahead of the API server's by less than
// the back-off. A report with startedAt is not: a node clock behind the
// API server's makes a report the crashed run wrote before its crash look
// later than it, and startedAt already says which run wrote it.
func runSince(pod *corev1.Pod, started *metav1.Time, written, finished time.Time) bool {
	if started != nil && after(started.Time, finished) {
		return true
	}
	if written.IsZero() {
		return false
	}
	if publishedBefore(pod, written) {
		return true
	}
	return started == nil && after(written, finished)
}

// publishedBefore reports whether the API server saw pod's container
// states last published before a write at written, both on its clock and
// to the second (after: a write in the same second counts as before);
// false when no publication is shown (StatusWrittenAt). StatusWrittenAt
// moves with any write of the kubelet's, so it orders a report only until
// the kubelet next writes the pod's status for any reason.
func publishedBefore(pod *corev1.Pod, written time.Time) bool {
	w := StatusWrittenAt(pod)
	return !w.IsZero() && after(written, w)
}

// StatusWrittenAt returns when the API server last saw the runtime
// container's state published: the time, to the second, of the latest write
// of pod's status subresource whose managed-fields entry owns
// status.containerStatuses (OwnsContainerStatuses: the kubelet's, KWOK's or
// the dev pod runner's, whatever its manager's name); zero if none is shown.
// A write of the pod's status that publishes no container's state (a
// readiness-gate controller's condition, an eviction's DisruptionTarget)
// does not count: it may come after a runtime's report, and would hide
// that the report came after the termination it was published with. The
// controller's pod cache keeps these entries (manager's cache transform).
func StatusWrittenAt(pod *corev1.Pod) time.Time {
	var at time.Time
	for _, mf := range pod.ManagedFields {
		if mf.Subresource == "status" && mf.Time != nil && mf.Time.After(at) && mf.FieldsV1 != nil && OwnsContainerStatuses(mf.FieldsV1.Raw) {
			at = mf.Time.Time
		}
	}
	return at
}

// OwnsContainerStatuses reports whether raw, a pod's managed-fields entry's
// fieldsV1 (JSON), owns status.containerStatuses or a part of it; false for
// anything that does not parse.
func OwnsContainerStatuses(raw []byte) bool {
	if !bytes.Contains(raw, []byte(`"f:containerStatuses"`)) {
		return false
	}
	var fields struct {
		Status map[string]json.RawMessage `json:"f:status"`
	}
	if err := json.Unmarshal(raw, &fields); err != nil {
		return false
	}
	_, ok := fields.Status["f:containerStatuses"]
	return ok
}

// lastTermination returns when the runtime container c last terminated
// (lastState.terminated.finishedAt), and false if the kubelet shows none.
func lastTermination(c *corev1.ContainerStatus) (time.Time, bool) {
	if c == nil || c.LastTerminationState.Terminated == nil || c.LastTerminationState.Terminated.FinishedAt.IsZero() {
		return time.Time{}, false
	}
	return c.LastTerminationState.Terminated.FinishedAt.Time, true
}

// after reports whether a report written at written comes after a
// termination at finished, to the second the API stores both in: the same
// second counts as before.
func after(written, finished time.Time) bool {
	return written.Truncate(time.Second).After(finished.Truncate(time.Second))
}

// NeverStarted reports whether the pod's runtime has never run: the pod is
// not terminal, the kubelet shows its runtime container never started (see
// kubeletShowsStart), no runtime report names the pod, and the controller
// has not recorded a start of it. Such a pod (Pending, unschedulable,
// pulling its image, held by a failing init container) cannot have
// accepted a turn, so it needs no drain: there is no runtime to answer
// one. st is the session's status: its report (status.runtime) and its
// record (status.startedPodUID).
//
// The report covers a kubelet that has started the container but not yet
// published its status: a runtime accepts turns only after it has
// published a Serving report naming its pod. The record keeps that
// evidence once the controller has seen it, so a later write that replaces
// status.runtime (an admin's, a stale writer's) does not make a live
// runtime's pod look never started.
func NeverStarted(pod *corev1.Pod, st lullv1.SessionStatus) (bool, string) {
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return false, ""
	}
	if startSeen(pod, st) || kubeletShowsStart(pod) {
		return false, ""
	}
	c := runtimeStatus(pod)
	if c == nil {
		return true, fmt.Sprintf("runtime container has not started (pod %s)", describePending(pod))
	}
	why := "waiting"
	if w := c.State.Waiting; w != nil && w.Reason != "" {
		why = w.Reason
	}
	return true, fmt.Sprintf("runtime container has never started (%s)", why)
}

// describePending says why a pod without a runtime container status is
// pending: its PodScheduled condition when unscheduled, else its phase.
func describePending(pod *corev1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
			msg := strings.TrimSpace(c.Reason + ": " + c.Message)
			return "unscheduled, " + strings.TrimSuffix(msg, ":")
		}
	}
	if pod.Status.Phase == "" {
		return "no status yet"
	}
	return string(pod.Status.Phase)
}

// sidecarStatus returns the status of the pod's drain sidecar (an init
// container named lullv1.AgentContainerName), or nil.
func sidecarStatus(pod *corev1.Pod) *corev1.ContainerStatus {
	for i := range pod.Status.InitContainerStatuses {
		if pod.Status.InitContainerStatuses[i].Name == lullv1.AgentContainerName {
			return &pod.Status.InitContainerStatuses[i]
		}
	}
	return nil
}

// runtimeStatus returns the status of the pod's runtime container, or nil.
func runtimeStatus(pod *corev1.Pod) *corev1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == lullv1.RuntimeContainerName {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// Backoff bounds how often failed stale pods are replaced: none before the
// first failed replacement, then 5 s doubling per failed replacement, capped
// at 5 minutes. The count resets once the session runs a ready current pod.
func Backoff(failedReplacements int32) time.Duration {
	const base, limit = 5 * time.Second, 5 * time.Minute
	if failedReplacements <= 0 {
		return 0
	}
	d := base
	for i := int32(1); i < failedReplacements && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

func backoffRemaining(st lullv1.SessionStatus, now time.Time) time.Duration {
	if st.LastFailedReplacementTime == nil {
		return 0
	}
	return st.LastFailedReplacementTime.Add(Backoff(st.FailedReplacements)).Sub(now)
}
