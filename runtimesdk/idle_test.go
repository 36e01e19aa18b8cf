package runtimesdk

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/utils/clock"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
)

// A turn attempted while an Idle drain request is outstanding is a user
// back in a session being culled: the gate still refuses it (the request
// stands until the controller withdraws it), but records it as activity,
// as Bump does. No other refusal is activity: not one for another reason,
// not one on a pod already committed for replacement, not one while the
// gate starts or reopens.
func TestTurnRefusedByAnIdleDrainIsActivity(t *testing.T) {
	idle := drain.RequestID(testPod, lullv1.DrainReasonIdle, 1)
	for _, tc := range []struct {
		name     string
		gate     func(t *testing.T, clk clock.WithDelayedExecution) *Gate
		activity bool
	}{
		{"Idle, drained", func(t *testing.T, clk clock.WithDelayedExecution) *Gate {
			g := openGate(t, clk)
			g.SetRequest(idle, lullv1.DrainReasonIdle)
			return g
		}, true},
		{"Idle, draining", func(t *testing.T, clk clock.WithDelayedExecution) *Gate {
			g := openGate(t, clk)
			g.BeginTurn(TurnOptions{}) //nolint:errcheck // accepted: the gate is open
			g.SetRequest(idle, lullv1.DrainReasonIdle)
			return g
		}, true},
		{"Idle, committed for replacement", func(t *testing.T, clk clock.WithDelayedExecution) *Gate {
			g := openGate(t, clk)
			g.SetRequest(idle, lullv1.DrainReasonIdle)
			g.SetHeld(true)
			return g
		}, false},
		{"Idle, withdrawn, reopening", func(t *testing.T, clk clock.WithDelayedExecution) *Gate {
			g := openGate(t, clk)
			g.SetRequest(idle, lullv1.DrainReasonIdle)
			g.SetRequest("", "")
			return g
		}, false},
		{"Update", func(t *testing.T, clk clock.WithDelayedExecution) *Gate {
			g := openGate(t, clk)
			g.SetRequest(req1, lullv1.DrainReasonUpdate)
			return g
		}, false},
		{"Lifetime", func(t *testing.T, clk clock.WithDelayedExecution) *Gate {
			g := openGate(t, clk)
			g.SetRequest(drain.RequestID(testPod, lullv1.DrainReasonLifetime, 1), lullv1.DrainReasonLifetime)
			return g
		}, false},
		{"Manual", func(t *testing.T, clk clock.WithDelayedExecution) *Gate {
			g := openGate(t, clk)
			g.SetRequest(drain.RequestID(testPod, lullv1.DrainReasonManual, 1), lullv1.DrainReasonManual)
			return g
		}, false},
		{"starting", func(_ *testing.T, clk clock.WithDelayedExecution) *Gate { return newGate(clk) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			g := tc.gate(t, clk)
			before := g.Snapshot()
			clk.Step(2 * time.Millisecond) // so that the attempt is later than any activity before it
			attempted := clk.Now()
			_, err := g.BeginTurn(TurnOptions{})
			if !errors.Is(err, ErrDraining) {
				t.Fatalf("BeginTurn = %v, want ErrDraining", err)
			}
			after := g.Snapshot()
			if after.State != before.State || after.RequestID != before.RequestID || after.ActiveTurns != before.ActiveTurns || after.Accepting {
				t.Errorf("the refused turn changed the drain: %+v, was %+v", after, before)
			}
			switch {
			case tc.activity && after.LastActivity.Before(attempted):
				t.Errorf("LastActivity %v, want the attempt at %v recorded", after.LastActivity, attempted)
			case tc.activity && after.Seq == before.Seq:
				t.Error("the recorded activity was not published to subscribers")
			case !tc.activity && (!after.LastActivity.Equal(before.LastActivity) || after.Seq != before.Seq):
				t.Errorf("the refused turn changed the gate: LastActivity %v (was %v)", after.LastActivity, before.LastActivity)
			}
		})
	}
}

// A user who comes back to a session being suspended for inactivity wakes
// it: the refused attempt, and a Bump, are reported at once, not after the
// minute the rate limit would otherwise hold them, so the controller
// withdraws the request in time; the gate reopens on the withdrawal.
func TestIdleDrainWakesOnActivity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSession()
		rt := startRuntime(t, f)
		settled(t, "the gate is open", func() bool { return rt.Snapshot().Accepting })
		if r := f.lastReport(); r.LastActivity != nil {
			t.Errorf("startup report %+v has activity; there was none", r)
		}
		id := drain.RequestID(testPod, lullv1.DrainReasonIdle, 1)
		f.requestDrainFor(id, testPod, lullv1.DrainReasonIdle)
		wantReport(t, f, "Drained", isState(lullv1.RuntimeDrained, id))

		// At once: the clock does not move before the report is looked at.
		attempted := f.clock.Now()
		_, err := rt.BeginTurn(TurnOptions{})
		var de *DrainingError
		if !errors.As(err, &de) || de.Reason != lullv1.DrainReasonIdle || de.RequestID != id {
			t.Fatalf("BeginTurn during an Idle drain = %v, want a DrainingError for %s", err, id)
		}
		r := wantReport(t, f, "the attempt reported at once", func(r *lullv1.RuntimeReport) bool { return r.LastActivity != nil })
		if r.State != lullv1.RuntimeDrained || r.RequestID != id || r.LastActivity.Time.Before(attempted.Truncate(time.Second)) {
			t.Errorf("report %+v, want Drained for %s with the attempt's time", r, id)
		}

		// Bump in a later second than the attempt: reported at once too.
		advance(f.clock, time.Second)
		bumped := f.clock.Now()
		rt.Bump()
		wantReport(t, f, "the bump reported at once", func(r *lullv1.RuntimeReport) bool {
			return r.LastActivity != nil && !r.LastActivity.Time.Before(bumped.Truncate(time.Second))
		})

		f.withdraw()
		settled(t, "the gate has reopened", func() bool { return rt.Snapshot().Accepting })
		turn, err := rt.BeginTurn(TurnOptions{})
		if err != nil {
			t.Fatalf("BeginTurn once the Idle request is withdrawn: %v", err)
		}
		turn.End()
	})
}

// Outside an Idle drain, activity alone is still rate-limited: a Bump
// during an Update drain waits for the interval (here, for ever).
func TestActivityDuringAnUpdateDrainIsRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSession()
		rt := startRuntime(t, f)
		f.requestDrain(req1, testPod)
		wantReport(t, f, "Drained", isState(lullv1.RuntimeDrained, req1))
		n := f.reportCount()
		rt.Bump()
		rt.BeginTurn(TurnOptions{}) //nolint:errcheck // refused
		advance(f.clock, 300*time.Millisecond)
		if got := f.reportCount() - n; got != 0 {
			t.Errorf("%d reports after a Bump during an Update drain, want none before the interval", got)
		}
	})
}
