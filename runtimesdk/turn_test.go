package runtimesdk

import (
	"errors"
	"regexp"
	"testing"
	"testing/synctest"
	"time"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

func TestExpiredLeaseReleasesTheDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := newFakeClock()
		g := openGate(t, clk)
		const lease = 30 * time.Millisecond
		crashed, err := g.BeginTurn(TurnOptions{Lease: lease})
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`^t-[0-9a-f]{16}$`).MatchString(crashed.ID()) {
			t.Errorf("turn ID %q, want t-<16 hex>", crashed.ID())
		}
		if exp := crashed.ExpiresAt(); !exp.Equal(clk.Now().Add(lease)) {
			t.Errorf("ExpiresAt = %v, want the lease from now, %v", exp, clk.Now().Add(lease))
		}
		activity := g.Snapshot().LastActivity
		g.SetRequest(req1, lullv1.DrainReasonUpdate)
		if s := g.Snapshot(); s.State != lullv1.RuntimeDraining || s.ActiveTurns != 1 {
			t.Fatalf("with a leased turn active: %+v, want Draining with 1 turn", s)
		}
		advance(clk, lease) // the lease runs out: its grace begins
		advance(clk, lease) // the grace runs out
		s := g.Snapshot()
		if s.State != lullv1.RuntimeDrained || s.ActiveTurns != 0 || s.ExpiredTurns != 1 {
			t.Errorf("after the lease and its grace: %+v, want Drained with 0 active and 1 expired", s)
		}
		if !s.LastActivity.Equal(activity) {
			t.Error("an expiry counted as activity")
		}
		if err := crashed.Err(); !errors.Is(err, ErrLeaseExpired) {
			t.Errorf("Err = %v, want ErrLeaseExpired", err)
		}
		if _, err := crashed.Renew(); !errors.Is(err, ErrLeaseExpired) {
			t.Errorf("Renew of an expired turn = %v, want ErrLeaseExpired", err)
		}
		crashed.End()
		if s := g.Snapshot(); s.ExpiredTurns != 1 || s.ActiveTurns != 0 || !s.LastActivity.Equal(activity) {
			t.Errorf("End of an expired turn changed the gate: %+v", s)
		}
	})
}

func TestRenewKeepsALeasedTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := newFakeClock()
		g := openGate(t, clk)
		const lease = 300 * time.Millisecond
		turn, err := g.BeginTurn(TurnOptions{Lease: lease})
		if err != nil {
			t.Fatal(err)
		}
		g.SetRequest(req1, lullv1.DrainReasonUpdate)
		for range 12 { // 12 × lease/10 outlives the lease
			advance(clk, lease/10)
			exp, err := turn.Renew()
			if err != nil {
				t.Fatalf("Renew: %v", err)
			}
			if left := exp.Sub(clk.Now()); left <= 0 || left > lease {
				t.Fatalf("Renew returned expiry %v, want within the lease from now", exp)
			}
		}
		if s := g.Snapshot(); s.State != lullv1.RuntimeDraining || s.ActiveTurns != 1 {
			t.Fatalf("renewed turn: %+v, want still Draining with 1 turn", s)
		}
		turn.End()
		if s := g.Snapshot(); s.State != lullv1.RuntimeDrained || s.ExpiredTurns != 0 {
			t.Errorf("after End: %+v, want Drained with no expiry", s)
		}
		if _, err := turn.Renew(); !errors.Is(err, ErrTurnEnded) {
			t.Errorf("Renew after End = %v, want ErrTurnEnded", err)
		}
		if err := turn.Err(); !errors.Is(err, ErrTurnEnded) {
			t.Errorf("Err after End = %v, want ErrTurnEnded", err)
		}
	})
}

// A Renew past the deadline and its grace (one more lease) expires the turn.
func TestRenewAfterDeadlineExpires(t *testing.T) {
	clk := newFakeClock()
	g := openGate(t, clk)
	turn, err := g.BeginTurn(TurnOptions{Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	turn.deadline = clk.Now().Add(-time.Hour - time.Millisecond) // the timer has not fired yet
	g.mu.Unlock()
	if _, err := turn.Renew(); !errors.Is(err, ErrLeaseExpired) {
		t.Fatalf("Renew past the deadline and its grace = %v, want ErrLeaseExpired", err)
	}
	if s := g.Snapshot(); s.ActiveTurns != 0 || s.ExpiredTurns != 1 {
		t.Errorf("after a late Renew: %+v, want the turn expired", s)
	}
}

func TestTurnWithoutLease(t *testing.T) {
	g := openGate(t, newFakeClock())
	turn, err := g.BeginTurn(TurnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if exp, err := turn.Renew(); err != nil || !exp.IsZero() || !turn.ExpiresAt().IsZero() {
		t.Errorf("Renew of a turn without lease = %v, %v; want zero time, nil", exp, err)
	}
	if turn.Err() != nil {
		t.Errorf("Err of an active turn = %v", turn.Err())
	}
	turn.End()
	if _, err := g.BeginTurn(TurnOptions{Lease: -time.Second}); err == nil || errors.Is(err, ErrDraining) {
		t.Errorf("BeginTurn with a negative lease = %v, want an argument error", err)
	}
}
