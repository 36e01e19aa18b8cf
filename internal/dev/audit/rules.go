package audit

// The auditor's own reading of the drain protocol (docs/protocol.md).
//
// Nothing here is shared with the controller: no import of package drain,
// internal/rollout, internal/manager or internal/controller (imports_test.go
// enforces it). A bug in the controller's decision code must not excuse the
// same deletion in both places, so each rule is written again, from the
// protocol document, as a pure function of what the auditor saw.
//
// A pod deletion is allowed when, judged from what was on the API server
// before it (resourceVersions order the writes of different objects):
//
//   - a Drained report from the pod answered the session's drain request for
//     that pod, and the runtime had not reopened nor the request been
//     withdrawn or replaced since (DrainedBefore);
//   - the pod had failed: phase Failed or Succeeded, or its runtime container
//     waiting with a reason that means it cannot start (RuntimeFailed). A
//     failing sidecar or init container does not count;
//   - the runtime had never started: no running or terminated state of the
//     runtime container, now or last, no restart, and no runtime report
//     naming the pod (RuntimeNeverStarted, ReportedBefore);
//   - the session carried lull.dev/force-update, "true" or the ID of the
//     request outstanding for that pod (ForcedBefore), or the test exempted
//     the pod;
//   - the drain request outstanding for the pod named a deadline, and the
//     deletion came after it (DeadlinePassedBefore): the runtime was told
//     when its pod would go (the Replace strategy, onDrainTimeout Replace).
//
// Independently of deletions, a drain request ID issued twice for one pod
// is a violation (RequestLedger).

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/journal"
)

// cannotStart lists the waiting reasons of a runtime container that mean it
// cannot start in this pod: the kubelet's crash-loop, image and container
// config back-offs.
var cannotStart = map[string]bool{
	"CrashLoopBackOff":           true,
	"ImagePullBackOff":           true,
	"ErrImagePull":               true,
	"ErrImageNeverPull":          true,
	"InvalidImageName":           true,
	"CreateContainerConfigError": true,
	"CreateContainerError":       true,
	"RunContainerError":          true,
}

// runtimeStatus returns the status of the pod's runtime container (named
// lullv1.RuntimeContainerName among the regular containers), or nil.
func runtimeStatus(pod *corev1.Pod) *corev1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == lullv1.RuntimeContainerName {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// RuntimeFailed reports whether pod, as last seen before its deletion, could
// not have been serving a turn because it had failed: its phase is Failed or
// Succeeded, or its runtime container is waiting with a reason in
// cannotStart. Only the phase and the runtime container count.
func RuntimeFailed(pod *corev1.Pod) (bool, string) {
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return true, "pod phase " + string(pod.Status.Phase)
	}
	if c := runtimeStatus(pod); c != nil && c.State.Waiting != nil && cannotStart[c.State.Waiting.Reason] {
		return true, "runtime container " + c.State.Waiting.Reason
	}
	return false, ""
}

// RuntimeNeverStarted reports whether, judged from the pod alone, its runtime
// container had never started: the pod is not terminal, and the runtime
// container has no status, or one with no running or terminated state, now
// or last, and no restart. The rule also requires that no runtime report
// named the pod (ReportedBefore); Judge combines the two.
func RuntimeNeverStarted(pod *corev1.Pod) (bool, string) {
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return false, ""
	}
	c := runtimeStatus(pod)
	if c == nil {
		return true, "no status for the runtime container"
	}
	if c.RestartCount > 0 || c.State.Running != nil || c.State.Terminated != nil ||
		c.LastTerminationState.Running != nil || c.LastTerminationState.Terminated != nil {
		return false, ""
	}
	why := "runtime container waiting"
	if w := c.State.Waiting; w != nil && w.Reason != "" {
		why += " (" + w.Reason + ")"
	}
	return true, why
}

// runtimeState describes the runtime container for a violation message.
func runtimeState(pod *corev1.Pod) string {
	c := runtimeStatus(pod)
	switch {
	case c == nil:
		return "no runtime container status"
	case c.State.Running != nil:
		return fmt.Sprintf("runtime container running (restarts %d)", c.RestartCount)
	case c.State.Terminated != nil:
		return fmt.Sprintf("runtime container terminated: %s (restarts %d)", c.State.Terminated.Reason, c.RestartCount)
	case c.State.Waiting != nil:
		return fmt.Sprintf("runtime container waiting: %s (restarts %d)", c.State.Waiting.Reason, c.RestartCount)
	}
	return fmt.Sprintf("runtime container in no state (restarts %d)", c.RestartCount)
}

// otherFailures names the containers other than the runtime that were
// failing: they do not excuse a deletion, but a violation says they were
// seen.
func otherFailures(pod *corev1.Pod) []string {
	var out []string
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, c := range list {
			if c.Name == lullv1.RuntimeContainerName {
				continue
			}
			switch {
			case c.State.Waiting != nil && cannotStart[c.State.Waiting.Reason]:
				out = append(out, c.Name+" "+c.State.Waiting.Reason)
			case c.State.Terminated != nil && c.State.Terminated.ExitCode != 0:
				out = append(out, fmt.Sprintf("%s exited %d", c.Name, c.State.Terminated.ExitCode))
			}
		}
	}
	return out
}

// Sighting is one version of a Session as the auditor saw it, reduced to
// what the rules read.
type Sighting struct {
	// RV is the session's resourceVersion.
	RV uint64
	// At is when the auditor saw it.
	At time.Time
	// Force is the lull.dev/force-update annotation.
	Force string
	// Drain is status.drain; Runtime is status.runtime.
	Drain   *lullv1.DrainRequest
	Runtime *lullv1.RuntimeReport
}

// sightingOf reduces a session to a Sighting.
func sightingOf(s *lullv1.Session, at time.Time) Sighting {
	return Sighting{RV: rv(s), At: at, Force: s.Annotations[lullv1.AnnotationForceUpdate],
		Drain: s.Status.Drain.DeepCopy(), Runtime: s.Status.Runtime.DeepCopy()}
}

// sameForRules reports whether two sightings hold the same facts for the
// rules, so the auditor keeps only the first of a run of them (the runtime
// rewrites its report as activity changes). Every field a rule reads must
// be compared here: a version that differs only in a field left out is
// dropped, and the rules judge on the version before it. The deadline
// counts: it may be added to a request already outstanding (a break-glass,
// a drainTimeout set mid-drain) with nothing else changing.
func sameForRules(a, b Sighting) bool {
	if a.Force != b.Force || (a.Drain == nil) != (b.Drain == nil) || (a.Runtime == nil) != (b.Runtime == nil) {
		return false
	}
	if a.Drain != nil && (a.Drain.RequestID != b.Drain.RequestID || a.Drain.PodUID != b.Drain.PodUID ||
		!a.Drain.RequestedAt.Equal(&b.Drain.RequestedAt) || a.Drain.Sequence != b.Drain.Sequence ||
		!a.Drain.Deadline.Equal(b.Drain.Deadline)) {
		return false
	}
	if a.Runtime != nil && (a.Runtime.PodUID != b.Runtime.PodUID || a.Runtime.RequestID != b.Runtime.RequestID ||
		a.Runtime.State != b.Runtime.State || a.Runtime.ActiveTurns != b.Runtime.ActiveTurns) {
		return false
	}
	return true
}

// before returns the sightings written before resourceVersion rv, oldest
// first.
func before(sightings []Sighting, rv uint64) []Sighting {
	out := make([]Sighting, 0, len(sightings))
	for _, s := range sightings {
		if s.RV < rv {
			out = append(out, s)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].RV < out[j].RV })
	return out
}

// DrainedAnswer reports whether one version of a session holds a Drained
// report from pod that answers the session's drain request for pod: the
// report names pod, is Drained with no active turn, and carries the request
// ID of status.drain in the same version, whose pod UID is pod too.
func DrainedAnswer(s Sighting, pod types.UID) bool {
	d, r := s.Drain, s.Runtime
	return pod != "" && d != nil && r != nil && d.RequestID != "" &&
		d.PodUID == pod && r.PodUID == pod &&
		r.State == lullv1.RuntimeDrained && r.ActiveTurns == 0 &&
		r.RequestID == d.RequestID
}

// DrainedBefore reports whether a Drained answer from pod (DrainedAnswer)
// still held when the pod was deleted at resourceVersion deletionRV, and
// when it was first seen and for which request. An answer stops holding
// once the pod's runtime reports Serving (it reopened), or the drain request
// for the pod is withdrawn or replaced by another: the controller may
// delete only on an answer to the request outstanding.
func DrainedBefore(sightings []Sighting, pod types.UID, deletionRV uint64) (at time.Time, requestID string, ok bool) {
	for _, s := range before(sightings, deletionRV) {
		switch {
		case DrainedAnswer(s, pod):
			if !ok || requestID != s.Drain.RequestID {
				at, requestID, ok = s.At, s.Drain.RequestID, true
			}
		case !ok:
		case s.Runtime != nil && s.Runtime.PodUID == pod && s.Runtime.State == lullv1.RuntimeServing:
			at, requestID, ok = time.Time{}, "", false // reopened
		case s.Drain == nil || s.Drain.PodUID != pod || s.Drain.RequestID != requestID:
			at, requestID, ok = time.Time{}, "", false // withdrawn or replaced
		}
	}
	return at, requestID, ok
}

// ReportedBefore reports whether a runtime report naming pod was on the
// session before deletionRV: its runtime had started.
func ReportedBefore(sightings []Sighting, pod types.UID, deletionRV uint64) bool {
	for _, s := range before(sightings, deletionRV) {
		if s.Runtime != nil && s.Runtime.PodUID == pod {
			return true
		}
	}
	return false
}

// ForcedBefore reports whether the session, as last seen before deletionRV,
// carried lull.dev/force-update "true", or the exact ID of its drain request
// for pod (which forces that request only).
func ForcedBefore(sightings []Sighting, pod types.UID, deletionRV uint64) bool {
	seen := before(sightings, deletionRV)
	if len(seen) == 0 {
		return false
	}
	s := seen[len(seen)-1]
	return s.Force == "true" || (s.Force != "" && s.Drain != nil && s.Drain.PodUID == pod && s.Force == s.Drain.RequestID)
}

// DeadlinePassedBefore reports whether the session, as last seen before
// deletionRV, had a drain request for pod whose deadline was not after at,
// when the deletion was made. (at is the API server's stamp of the delete,
// its deletionTimestamp minus the grace period, when the auditor saw one;
// otherwise when the auditor saw the deletion, later than it by the
// watch's latency.)
func DeadlinePassedBefore(sightings []Sighting, pod types.UID, deletionRV uint64, at time.Time) bool {
	seen := before(sightings, deletionRV)
	if len(seen) == 0 {
		return false
	}
	d := seen[len(seen)-1].Drain
	return d != nil && d.PodUID == pod && d.Deadline != nil && !at.Before(d.Deadline.Time)
}

// Grounds are what Judge found for one deletion.
type Grounds struct {
	Drained      bool
	DrainedAt    time.Time
	RequestID    string // the request the Drained report answered
	Failed       bool
	FailedReason string
	NeverStarted bool
	Forced       bool
	// DeadlinePassed: the pod's drain request had a deadline, passed.
	DeadlinePassed bool
	// Detail says what the auditor saw of the runtime, for a violation.
	Detail string
}

// Judge applies the rules to one deletion: pod is the pod as last seen
// before it was deleted, deletionRV the resourceVersion of the first write
// that showed the deletion, at when the auditor saw it, sightings the
// versions of its session.
func Judge(pod *corev1.Pod, deletionRV uint64, at time.Time, sightings []Sighting) Grounds {
	var g Grounds
	g.DrainedAt, g.RequestID, g.Drained = DrainedBefore(sightings, pod.UID, deletionRV)
	g.Failed, g.FailedReason = RuntimeFailed(pod)
	reported := ReportedBefore(sightings, pod.UID, deletionRV)
	never, neverWhy := RuntimeNeverStarted(pod)
	g.NeverStarted = never && !reported
	g.Forced = ForcedBefore(sightings, pod.UID, deletionRV)
	g.DeadlinePassed = DeadlinePassedBefore(sightings, pod.UID, deletionRV, at)

	detail := []string{"phase " + string(pod.Status.Phase), runtimeState(pod)}
	switch {
	case g.NeverStarted:
		detail = append(detail, "never started: "+neverWhy)
	case never:
		detail = append(detail, "its runtime had reported, so it had started")
	}
	if others := otherFailures(pod); len(others) > 0 {
		detail = append(detail, "failing non-runtime containers, which excuse nothing: "+strings.Join(others, ", "))
	}
	g.Detail = strings.Join(detail, "; ")
	return g
}

// DeletionViolation returns the violation d is, or "" when a rule allows it.
func DeletionViolation(d Deletion) string {
	if d.Exempt != "" || d.Drained || d.Failed || d.NeverStarted || d.Forced || d.DeadlinePassed {
		return ""
	}
	return fmt.Sprintf("pod %s/%s (%s) was deleted at %s without a matching Drained report, not failed, started, not forced, before any deadline (%s)",
		d.Namespace, d.Pod, d.PodUID, d.At.Format(time.RFC3339Nano), d.Detail)
}

// TurnVerdict is the journal's turns judged against the deletions.
type TurnVerdict struct {
	Completed   int
	InFlight    int
	Interrupted []journal.Turn
	Violations  []string
}

// JudgeTurns sorts the journaled turns against the deletions (by pod UID):
// a turn ended before its pod's deletion completed; a turn still open on a
// pod that was not deleted is in flight; one open when its pod was deleted
// is interrupted, a violation unless the pod had failed, or its deletion was
// forced, past its drain deadline or exempt. A turn begun after its deleted pod reported Drained is a
// violation too: Drained seals the runtime.
func JudgeTurns(turns []journal.Turn, deleted map[types.UID]Deletion) TurnVerdict {
	var v TurnVerdict
	for _, t := range turns {
		d, wasDeleted := deleted[t.PodUID]
		if wasDeleted && d.Drained && t.Began.After(d.DrainedAt) {
			v.Violations = append(v.Violations, fmt.Sprintf("turn %d of session %s/%s began on pod %s at %s, after the runtime reported Drained at %s",
				t.Turn, t.Namespace, t.Session, t.PodUID, t.Began.Format(time.RFC3339Nano), d.DrainedAt.Format(time.RFC3339Nano)))
		}
		switch {
		case !t.Ended.IsZero() && (!wasDeleted || t.Ended.Before(d.At)):
			v.Completed++
		case !wasDeleted:
			v.InFlight++
		default:
			v.Interrupted = append(v.Interrupted, t)
			if !d.Failed && !d.Forced && !d.DeadlinePassed && d.Exempt == "" {
				v.Violations = append(v.Violations, fmt.Sprintf("turn %d of session %s/%s on pod %s began %s and was open when the pod was deleted at %s",
					t.Turn, t.Namespace, t.Session, t.PodUID, t.Began.Format(time.RFC3339Nano), d.At.Format(time.RFC3339Nano)))
			}
		}
	}
	return v
}

// RequestLedger remembers every drain request issued for each pod, to catch
// a request ID issued twice: request IDs are never reused for a pod, so no
// old Drained report can answer a new request.
type RequestLedger struct {
	issued      map[types.UID]map[string]*issuing
	outstanding map[types.NamespacedName]*lullv1.DrainRequest
}

type issuing struct {
	requestedAt time.Time
	sequence    int64
	withdrawn   bool
}

// NewRequestLedger returns an empty ledger.
func NewRequestLedger() *RequestLedger {
	return &RequestLedger{issued: map[types.UID]map[string]*issuing{}, outstanding: map[types.NamespacedName]*lullv1.DrainRequest{}}
}

// Observe records status.drain of one version of a session, given in the
// order of the session's versions, and returns a violation for a request ID
// issued again: one seen before for the same pod with another requestedAt
// or sequence, or one that reappears after it was withdrawn or replaced.
// The same request seen again (a restarted controller keeps it) is no
// violation.
func (l *RequestLedger) Observe(session types.NamespacedName, d *lullv1.DrainRequest) []string {
	if prev := l.outstanding[session]; prev != nil && (d == nil || d.PodUID != prev.PodUID || d.RequestID != prev.RequestID) {
		if is := l.issued[prev.PodUID][prev.RequestID]; is != nil {
			is.withdrawn = true
		}
	}
	l.outstanding[session] = d.DeepCopy()
	if d == nil || d.RequestID == "" {
		return nil
	}
	ids := l.issued[d.PodUID]
	if ids == nil {
		ids = map[string]*issuing{}
		l.issued[d.PodUID] = ids
	}
	now := issuing{requestedAt: d.RequestedAt.Time, sequence: d.Sequence}
	is := ids[d.RequestID]
	var what string
	switch {
	case is == nil:
		ids[d.RequestID] = &now
		return nil
	case is.withdrawn:
		what = "reappeared after it was withdrawn"
	case !is.requestedAt.Equal(now.requestedAt) || is.sequence != now.sequence:
		what = "was issued twice"
	default:
		return nil
	}
	msg := fmt.Sprintf("request ID reused: drain request %s for pod %s of session %s %s (requested at %s, sequence %d; earlier at %s, sequence %d)",
		d.RequestID, d.PodUID, session, what, now.requestedAt.UTC().Format(time.RFC3339), now.sequence, is.requestedAt.UTC().Format(time.RFC3339), is.sequence)
	*is = now
	return []string{msg}
}
