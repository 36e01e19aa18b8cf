package lifecycle

import (
	"testing"
	"time"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// behind returns the report of a runtime whose clock is skew behind the API
// server's: its turn ended (or a turn was attempted) at the server's
// moment `real`, and it stamped both lastActivity and reportedAt with its
// own clock; the API server saw the write at `real`.
func behind(s *lullv1.Session, real, skew time.Duration) time.Time {
	s.Status.Runtime.LastActivity = at(real - skew)
	s.Status.Runtime.ReportedAt = at(real - skew)
	return t0.Add(real)
}

// Guarantee 2 (never cull early) with a runtime clock behind the API
// server's: the session was judged Active a moment ago; its turn has just
// ended. Its lastActivity, stamped by a clock an hour slow, says an hour
// ago. The API server's times of the same write (reportedAt against the
// managed-fields time) show the skew; the session has been idle for a
// moment, not an hour, and must not be culled at once.
func TestRuntimeClockBehindDoesNotCullAtTheEndOfATurn(t *testing.T) {
	s := session(0, nil)
	s.Status.Lifecycle = &lullv1.LifecycleStatus{IdlePodUID: "p1"} // judged Active before
	written := behind(s, 0, time.Hour)
	j := Judge(Observed{Now: t0, Policy: suspend5m, Session: s, Pod: pod("p1", -2*time.Hour), ReportWrittenAt: written})
	if j.State != Idle || j.CullDue || j.Status.IdleSince.Time.Before(t0.Add(-5*time.Second)) {
		t.Fatalf("turn just ended, runtime clock 1h behind: idleSince %v due=%v; want idle since about now, no cull", j.Status.IdleSince, j.CullDue)
	}
}

// Guarantee 4 (a turn attempted during the idle drain cancels it) with a
// runtime clock behind: the session is due, an Idle drain is outstanding;
// the user tries a turn, the runtime records it as activity with its slow
// clock and reports at once. That activity is now, and must wake the
// session.
func TestRuntimeClockBehindStillWakesAnIdleDrain(t *testing.T) {
	s := session(0, nil)
	// Idle since ten minutes ago on the server's clock; the runtime's
	// clock, an hour slow, stamped that activity 70 minutes ago.
	written := behind(s, -10*time.Minute, time.Hour)
	first := Judge(Observed{Now: written, Policy: suspend5m, Session: s, Pod: pod("p1", -2*time.Hour), ReportWrittenAt: written})
	s.Status.Lifecycle = first.Status
	s.Status.Lifecycle.IdlePodUID = "p1"
	j := Judge(Observed{Now: t0, Policy: suspend5m, Session: s, Pod: pod("p1", -2*time.Hour), ReportWrittenAt: t0.Add(-time.Second)})
	if !j.CullDue {
		t.Fatalf("precondition: idle ten minutes under suspendAfter 5m should be due: %+v", j.Status)
	}
	s.Status.Lifecycle = j.Status
	// The user attempts a turn now.
	written = behind(s, 0, time.Hour)
	j = Judge(Observed{Now: t0, Policy: suspend5m, Session: s, Pod: pod("p1", -2*time.Hour), ReportWrittenAt: written})
	if j.CullDue {
		t.Fatalf("activity now, reported by a runtime whose clock is 1h behind: idleSince %v, still due; the attempt must wake the session", j.Status.IdleSince)
	}
}
