// Drain timings for lull_drain_request_to_drained_seconds and
// lull_drain_drained_to_delete_seconds, read from the session's status,
// not from timers kept in memory: a controller that restarts, or a new
// leader that takes over a drain half done, measures from the same
// timestamps the first one would have.
//
// Each is observed at a step the API server lets happen once per drain, so
// no drain is counted twice however often it is reconciled and by however
// many controllers:
//   - request → Drained when the commitment of the replacement lands. It is
//     a compare-and-swap on the Session's resourceVersion, and a committed
//     replacement is finished, never committed again (rollout.Decide).
//   - Drained → delete when the API server accepts the pod's delete. The
//     delete has a UID precondition, and neither this controller (its
//     expectations) nor one started after it (its cache shows the pod
//     terminating) deletes that pod again.
//
// A step whose answer is lost (the commit or delete happened, the
// controller saw an error) is not observed: such a drain is missed, never
// counted twice.

package session

import (
	"time"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/rollout"
)

// ReportTime returns when s's runtime report was written: the API server's
// time of the write (reportWrittenAt, from managed fields), or, when that is
// unknown, the runtime's own status.runtime.reportedAt. Zero if neither is
// known.
func ReportTime(s *lullv1.Session, reportWrittenAt time.Time) time.Time {
	if !reportWrittenAt.IsZero() {
		return reportWrittenAt
	}
	if r := s.Status.Runtime; r != nil && r.ReportedAt != nil {
		return r.ReportedAt.Time
	}
	return time.Time{}
}

// RequestToDrained returns how long s's runtime took to answer its drain
// request: from status.drain.requestedAt to reported, the time of the
// Drained report. ok is false unless s holds a drain request, a Drained
// report answering it and reported is known. A report stamped before the
// request (clock skew) reads 0.
func RequestToDrained(s *lullv1.Session, reported time.Time) (d time.Duration, ok bool) {
	req, r := s.Status.Drain, s.Status.Runtime
	if req == nil || r == nil || r.State != lullv1.RuntimeDrained || r.RequestID != req.RequestID || reported.IsZero() {
		return 0, false
	}
	return max(reported.Sub(req.RequestedAt.Time), 0), true
}

// DrainedToDelete returns how long after the Drained report (reported) the
// pod was deleted (deletedAt). ok is false unless the step replaced the pod
// for a Drained report (a.Replacement.Reason Drained) and reported is
// known.
func DrainedToDelete(a rollout.Action, reported, deletedAt time.Time) (d time.Duration, ok bool) {
	if a.Replacement == nil || a.Replacement.Reason != lullv1.ReplacementDrained || reported.IsZero() {
		return 0, false
	}
	return max(deletedAt.Sub(reported), 0), true
}

// committedDrain returns what records a's commitment once it has landed:
// the drain's duration, when the replacement answers a Drained report.
// It reads o now, before the status write refreshes o.Session.
func committedDrain(o rollout.Observed, a rollout.Action) (observe func()) {
	s := o.Session
	d, ok := RequestToDrained(s, ReportTime(s, o.ReportWrittenAt))
	if !ok || a.Replacement == nil || a.Replacement.Reason != lullv1.ReplacementDrained {
		return func() {}
	}
	h := requestToDrained.WithLabelValues(s.Namespace, s.Spec.TemplateRef.Name, string(s.Status.Drain.Reason))
	return func() { h.Observe(d.Seconds()) }
}

// observeDeleted records a pod delete the API server accepted at now: the
// time since the Drained report it answers, or a forced replacement.
func observeDeleted(o rollout.Observed, a rollout.Action, now time.Time) {
	s := o.Session
	if a.Replacement != nil && a.Replacement.Reason == lullv1.ReplacementDrained {
		if d, ok := DrainedToDelete(a, ReportTime(s, o.ReportWrittenAt), now); ok {
			drainedToDelete.WithLabelValues(s.Namespace, s.Spec.TemplateRef.Name).Observe(d.Seconds())
		}
		return
	}
	forcedReplacements.WithLabelValues(a.Reason).Inc()
}
