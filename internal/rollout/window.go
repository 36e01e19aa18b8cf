package rollout

import (
	"time"
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
