package lifecycle

import (
	"testing"
	"time"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// A session suspended by hand while no policy culls runs no idle clock
// either: deleteAfter set a month later starts the clock then, and does
// not delete at once a session suspended since long before (docs/
// lifecycle.md, idleSince: "enabling one never culls at once").
func TestDeleteAfterSetOnLongSuspendedSessionStartsTheClockThen(t *testing.T) {
	s := session(0, nil)
	s.Spec.Suspend = true
	// Judged while suspended, with no policy, 30 days ago.
	j := judge(s, nil, -30*24*time.Hour, 0, Policy{})
	if j.Status != nil && j.Status.IdleSince != nil {
		t.Errorf("suspended without a culling policy: %+v; want no idle clock", j.Status)
	}
	s.Status.Lifecycle = j.Status
	// deleteAfter 1h is set now.
	j = judge(s, nil, 0, 0, Policy{DeleteAfter: time.Hour})
	if j.CullDue {
		t.Fatalf("deleteAfter set on a session suspended 30 days ago: %+v; deleted at once, want the clock started now", j.Status)
	}
	if j.Status == nil || !j.Status.IdleSince.Equal(at(0)) || !j.Status.CullAt.Equal(at(time.Hour)) || j.Status.CullAction != lullv1.IdleDelete {
		t.Fatalf("deleteAfter set now: %+v; want idleSince now, Delete at now+1h", j.Status)
	}
}
