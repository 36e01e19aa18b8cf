package runtimesdk

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

func TestLeaseFate(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	const lease = 30 * time.Second
	deadline := t0.Add(lease)
	for _, tc := range []struct {
		name       string
		graceUntil time.Time
		now        time.Time
		want       leaseState
		wantGrace  time.Time
	}{
		{"before the deadline", time.Time{}, deadline.Add(-time.Nanosecond), leaseLive, time.Time{}},
		{"at the deadline", time.Time{}, deadline, leaseLapsed, deadline.Add(lease)},
		{"late timer: grace counts from the deadline", time.Time{}, deadline.Add(lease - time.Nanosecond), leaseLapsed, deadline.Add(lease)},
		{"past deadline and grace", time.Time{}, deadline.Add(lease), leaseExpired, time.Time{}},
		{"in a grace given earlier", deadline.Add(lease), deadline.Add(time.Second), leaseLapsed, deadline.Add(lease)},
		{"a grace given on restore, ahead of the deadline's", t0.Add(time.Hour), t0.Add(time.Hour - time.Second), leaseLapsed, t0.Add(time.Hour)},
		{"at the end of the grace", deadline.Add(lease), deadline.Add(lease), leaseExpired, time.Time{}},
		{"renewed: deadline ahead, grace cleared", time.Time{}, t0, leaseLive, time.Time{}},
	} {
		got, grace := leaseFate(deadline, tc.graceUntil, tc.now, lease)
		if got != tc.want || !grace.Equal(tc.wantGrace) {
			t.Errorf("%s: leaseFate = %d, %v; want %d, %v", tc.name, got, grace, tc.want, tc.wantGrace)
		}
	}
}

// lapse moves a leased turn's deadline into the past, as if its client had
// stalled past it; the turn's timer (an hour away) has not fired.
func lapse(g *Gate, turn *Turn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	turn.deadline = g.clock.Now().Add(-time.Millisecond)
}

func TestLateRenewDuringADrainRevivesTheTurn(t *testing.T) {
	for _, timerFired := range []bool{true, false} {
		clk := newFakeClock()
		g := openGate(t, clk)
		turn, err := g.BeginTurn(TurnOptions{Lease: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		g.SetRequest(req1, lullv1.DrainReasonUpdate)
		lapse(g, turn)
		if timerFired {
			turn.checkLease()
			if s := g.Snapshot(); s.State != lullv1.RuntimeDraining || s.ActiveTurns != 1 || s.LapsedTurns != 1 || s.ExpiredTurns != 0 {
				t.Fatalf("lapsed during a drain: %+v, want Draining with 1 active, 1 lapsed, 0 expired", s)
			}
			if err := turn.Err(); err != nil {
				t.Errorf("Err of a lapsed turn in its grace = %v, want nil", err)
			}
		}
		exp, err := turn.Renew()
		if err != nil || exp.Sub(clk.Now()) < 59*time.Minute {
			t.Fatalf("late Renew (timer fired %v) = %v, %v; want a full new lease", timerFired, exp, err)
		}
		if s := g.Snapshot(); s.State != lullv1.RuntimeDraining || s.ActiveTurns != 1 || s.LapsedTurns != 0 || s.ExpiredTurns != 0 {
			t.Errorf("revived (timer fired %v): %+v, want Draining with 1 active, none lapsed or expired", timerFired, s)
		}
		turn.End()
		if s := g.Snapshot(); s.State != lullv1.RuntimeDrained || s.ExpiredTurns != 0 {
			t.Errorf("after End: %+v, want Drained with no expiry", s)
		}
	}
}

func TestLapsedLeaseHoldsTheDrainForItsGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := newFakeClock()
		g := openGate(t, clk)
		const lease = 40 * time.Millisecond
		crashed, err := g.BeginTurn(TurnOptions{Lease: lease})
		if err != nil {
			t.Fatal(err)
		}
		g.SetRequest(req1, lullv1.DrainReasonUpdate)
		advance(clk, lease)
		if s := g.Snapshot(); s.State != lullv1.RuntimeDraining || s.ActiveTurns != 1 || s.LapsedTurns != 1 {
			t.Fatalf("once the lease ran out: %+v, want Draining with the turn active and lapsed", s)
		}
		// Drained before deadline + grace would mean the grace was skipped.
		advance(clk, lease-time.Nanosecond)
		if s := g.Snapshot(); s.State != lullv1.RuntimeDraining || s.LapsedTurns != 1 {
			t.Fatalf("a moment before the grace ends: %+v, want still Draining with the turn lapsed", s)
		}
		advance(clk, time.Nanosecond)
		if s := g.Snapshot(); s.State != lullv1.RuntimeDrained || s.ActiveTurns != 0 || s.LapsedTurns != 0 || s.ExpiredTurns != 1 {
			t.Errorf("once the grace ended: %+v, want Drained with 0 active, 0 lapsed, 1 expired", s)
		}
		if _, err := crashed.Renew(); !errors.Is(err, ErrLeaseExpired) {
			t.Errorf("Renew after the grace = %v, want ErrLeaseExpired", err)
		}
	})
}

// Outside a drain a lapsed lease gets the same grace as during one: a drain
// request that arrives inside the grace finds the turn active, and the
// turn ends, counted as expired, only once the grace has passed too.
func TestExpiryOutsideADrainWaitsOutTheGraceToo(t *testing.T) {
	clk := newFakeClock()
	g := openGate(t, clk)
	turn, err := g.BeginTurn(TurnOptions{Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	lapse(g, turn)
	turn.checkLease()
	if s := g.Snapshot(); s.ActiveTurns != 1 || s.LapsedTurns != 1 || s.ExpiredTurns != 0 {
		t.Fatalf("lapsed while serving: %+v, want 1 active (lapsed), 0 expired", s)
	}
	// The grace runs out.
	g.mu.Lock()
	turn.graceUntil = clk.Now().Add(-time.Millisecond)
	g.mu.Unlock()
	turn.checkLease()
	if _, err := turn.Renew(); !errors.Is(err, ErrLeaseExpired) {
		t.Errorf("Renew after the grace = %v, want ErrLeaseExpired", err)
	}
	g.SetRequest(req1, lullv1.DrainReasonUpdate)
	if s := g.Snapshot(); s.State != lullv1.RuntimeDrained || s.ExpiredTurns != 1 {
		t.Errorf("request after the grace: %+v, want Drained, 1 expired", s)
	}
}

func TestExpiredTurnsAreReportedAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease = 10 * time.Millisecond
		f := newFakeSession()
		rt := startRuntime(t, f)
		settled(t, "the gate is open", func() bool { return rt.Snapshot().Accepting })
		if _, err := rt.BeginTurn(TurnOptions{Lease: lease}); err != nil {
			t.Fatal(err)
		}
		// Outside a drain a changed turn count waits a minute; an expiry (after
		// the lease and its grace of one more lease) does not.
		advance(f.clock, lease)
		advance(f.clock, lease)
		r := wantReport(t, f, "a report of the expiry", func(r *lullv1.RuntimeReport) bool { return r.ExpiredTurns == 1 })
		if r.State != lullv1.RuntimeServing || r.ActiveTurns != 0 {
			t.Errorf("report %+v, want Serving with 0 active turns", r)
		}
		f.requestDrain(req1, testPod)
		r = wantReport(t, f, "Drained", isState(lullv1.RuntimeDrained, req1))
		if r.ExpiredTurns != 1 {
			t.Errorf("Drained report %+v, want expiredTurns 1", r)
		}
	})
}
