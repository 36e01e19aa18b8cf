package rollout

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// ExpectedCompletion estimates when a rollout finishes: the stale sessions
// move in waves of room, each wave as long as a drain takes (mean, from the
// drains watched so far). The result is rounded to the second; previous,
// the estimate last published, is kept while the new one is within a tenth
// of the time left of it, so the estimate does not rewrite the template's
// status on every reconcile.
func ExpectedCompletion(stale, room int, mean time.Duration, now time.Time, previous *time.Time) time.Time {
	waves := (stale + room - 1) / max(room, 1)
	eta := now.Add(time.Duration(waves) * mean).Truncate(time.Second)
	if previous != nil && previous.After(now) {
		left := previous.Sub(now)
		if d := eta.Sub(*previous); d < left/10 && -d < left/10 {
			return *previous
		}
	}
	return eta
}

// PassiveCompletion estimates when a rollout under the Passive strategy
// finishes: each running session not on revision rev moves at the earliest
// of its idle cull (status.lifecycle.cullAt) and its pod's lifetime
// deadline, so the rollout finishes at the latest of those. A stale session
// with neither (busy, or no idle policy and no maxLifetime) moves only when
// replaced for another reason: it is counted in unbounded, and the estimate
// is zero while any such session remains. Lifetime restarts also wait for
// a place in the wave, so the estimate is the earliest the rollout can
// finish.
//
// A lifetime deadline counts only when the restart can be started: while
// lifetimeRestarts (the wave gives places: the rollout is not paused) and
// the session's runtime reports (a runtime that does not is not drained
// for its lifetime until it reports again). Otherwise the deadline moves
// nothing, and the session counts by its cullAt alone.
func PassiveCompletion(sessions []lullv1.Session, rev string, lifetimeRestarts bool) (eta time.Time, unbounded int) {
	for i := range sessions {
		s := &sessions[i]
		if s.Spec.Suspend || s.DeletionTimestamp != nil || s.Status.TemplateRevision == "" || s.Status.TemplateRevision == rev {
			continue
		}
		var at time.Time
		if l := s.Status.Lifecycle; l != nil {
			times := []*metav1.Time{l.CullAt}
			if lifetimeRestarts && Reporting(s) {
				times = append(times, l.LifetimeDeadline)
			}
			for _, t := range times {
				if t != nil && (at.IsZero() || t.Time.Before(at)) {
					at = t.Time
				}
			}
		}
		if at.IsZero() {
			unbounded++
			continue
		}
		if at.After(eta) {
			eta = at
		}
	}
	if unbounded > 0 {
		return time.Time{}, unbounded
	}
	return eta, 0
}
