package runtimesdk

import (
	"testing"
	"testing/synctest"
	"time"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
)

// Guarantee 2: only turns beginning and ending, a turn attempted during an
// idle drain, and Bump are activity. Everything lull and the runtime's own
// plumbing do to the gate (reads, subscriptions, drain requests of every
// reason, withdrawals, holds, publications, notices, lease renewals, a
// lease running out) leaves lastActivity alone.
func TestOnlyRealWorkMovesLastActivity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := newFakeClock()
		g := openGate(t, clk)
		turn, err := g.BeginTurn(TurnOptions{Lease: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		last := g.Snapshot().LastActivity
		advance(clk, 5*time.Millisecond) // so that anything recorded now is later than last
		steps := []struct {
			name string
			do   func()
		}{
			{"Snapshot", func() { g.Snapshot() }},
			{"Subscribe", func() { _, cancel := g.Subscribe(); cancel() }},
			{"Renew", func() { turn.Renew() }}, //nolint:errcheck // a live lease
			{"SetNotice", func() {
				g.SetNotice(Notice{UpdatePending: true, UpdateRevision: "r2", Deadline: clk.Now().Add(time.Hour)})
			}},
			{"Published", func() { g.Published(lullv1.RuntimeServing) }},
			{"lease runs out", func() { advance(clk, 200*time.Millisecond); g.Snapshot() }},
			{"Lifetime request", func() {
				g.SetRequest(drain.RequestID(testPod, lullv1.DrainReasonLifetime, 1), lullv1.DrainReasonLifetime)
			}},
			{"withdrawn", func() { g.SetRequest("", "") }},
			{"Idle request", func() { g.SetRequest(drain.RequestID(testPod, lullv1.DrainReasonIdle, 2), lullv1.DrainReasonIdle) }},
			{"held", func() { g.SetHeld(true) }},
			{"turn refused while held", func() { g.BeginTurn(TurnOptions{}) }}, //nolint:errcheck // refused
			{"released", func() { g.SetHeld(false) }},
			{"Published Drained", func() { g.Published(lullv1.RuntimeDrained) }},
		}
		for _, s := range steps {
			s.do()
			if got := g.Snapshot().LastActivity; !got.Equal(last) {
				t.Fatalf("%s moved lastActivity from %s to %s", s.name, last.Format(time.RFC3339Nano), got.Format(time.RFC3339Nano))
			}
		}
		if g.Snapshot().ExpiredTurns == 0 {
			t.Fatal("precondition: the leased turn should have expired")
		}
		g.Bump()
		if got := g.Snapshot().LastActivity; !got.After(last) {
			t.Fatal("Bump did not move lastActivity")
		}
	})
}
