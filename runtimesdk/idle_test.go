package runtimesdk

import (
	"errors"
	"testing"
	"time"

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
		gate     func(t *testing.T) *Gate
		activity bool
	}{
		{"Idle, drained", func(t *testing.T) *Gate {
			g := openGate(t)
			g.SetRequest(idle, lullv1.DrainReasonIdle)
			return g
		}, true},
		{"Idle, draining", func(t *testing.T) *Gate {
			g := openGate(t)
			g.BeginTurn(TurnOptions{}) //nolint:errcheck // accepted: the gate is open
			g.SetRequest(idle, lullv1.DrainReasonIdle)
			return g
		}, true},
		{"Idle, committed for replacement", func(t *testing.T) *Gate {
			g := openGate(t)
			g.SetRequest(idle, lullv1.DrainReasonIdle)
			g.SetHeld(true)
			return g
		}, false},
		{"Idle, withdrawn, reopening", func(t *testing.T) *Gate {
			g := openGate(t)
			g.SetRequest(idle, lullv1.DrainReasonIdle)
			g.SetRequest("", "")
			return g
		}, false},
		{"Update", func(t *testing.T) *Gate {
			g := openGate(t)
			g.SetRequest(req1, lullv1.DrainReasonUpdate)
			return g
		}, false},
		{"Lifetime", func(t *testing.T) *Gate {
			g := openGate(t)
			g.SetRequest(drain.RequestID(testPod, lullv1.DrainReasonLifetime, 1), lullv1.DrainReasonLifetime)
			return g
		}, false},
		{"Manual", func(t *testing.T) *Gate {
			g := openGate(t)
			g.SetRequest(drain.RequestID(testPod, lullv1.DrainReasonManual, 1), lullv1.DrainReasonManual)
			return g
		}, false},
		{"starting", func(*testing.T) *Gate { return NewGate() }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := tc.gate(t)
			before := g.Snapshot()
			time.Sleep(2 * time.Millisecond)
			attempted := time.Now()
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
	f := newFakeSession()
	rt := startRuntime(t, f)
	waitFor(t, "the gate to open", func() bool { return rt.Snapshot().Accepting })
	if r := f.lastReport(); r.LastActivity != nil {
		t.Errorf("startup report %+v has activity; there was none", r)
	}
	id := drain.RequestID(testPod, lullv1.DrainReasonIdle, 1)
	f.requestDrainFor(id, testPod, lullv1.DrainReasonIdle)
	waitReport(t, f, "Drained", isState(lullv1.RuntimeDrained, id))

	attempted := time.Now()
	_, err := rt.BeginTurn(TurnOptions{})
	var de *DrainingError
	if !errors.As(err, &de) || de.Reason != lullv1.DrainReasonIdle || de.RequestID != id {
		t.Fatalf("BeginTurn during an Idle drain = %v, want a DrainingError for %s", err, id)
	}
	r := waitReport(t, f, "the attempt reported", func(r *lullv1.RuntimeReport) bool { return r.LastActivity != nil })
	if d := time.Since(attempted); d > time.Second {
		t.Errorf("the attempt was reported after %v, want at once", d)
	}
	if r.State != lullv1.RuntimeDrained || r.RequestID != id || r.LastActivity.Time.Before(attempted.Truncate(time.Second)) {
		t.Errorf("report %+v, want Drained for %s with the attempt's time", r, id)
	}

	// Bump in a later second than the attempt: reported at once too.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	bumped := time.Now()
	rt.Bump()
	waitReport(t, f, "the bump reported", func(r *lullv1.RuntimeReport) bool {
		return r.LastActivity != nil && !r.LastActivity.Time.Before(bumped.Truncate(time.Second))
	})
	if d := time.Since(bumped); d > time.Second {
		t.Errorf("the bump was reported after %v, want at once", d)
	}

	f.withdraw()
	waitFor(t, "the gate to reopen", func() bool { return rt.Snapshot().Accepting })
	turn, err := rt.BeginTurn(TurnOptions{})
	if err != nil {
		t.Fatalf("BeginTurn once the Idle request is withdrawn: %v", err)
	}
	turn.End()
}

// Outside an Idle drain, activity alone is still rate-limited: a Bump
// during an Update drain waits for the interval (here, for ever).
func TestActivityDuringAnUpdateDrainIsRateLimited(t *testing.T) {
	f := newFakeSession()
	rt := startRuntime(t, f)
	f.requestDrain(req1, testPod)
	waitReport(t, f, "Drained", isState(lullv1.RuntimeDrained, req1))
	n := f.reportCount()
	rt.Bump()
	rt.BeginTurn(TurnOptions{}) //nolint:errcheck // refused
	time.Sleep(300 * time.Millisecond)
	if got := f.reportCount() - n; got != 0 {
		t.Errorf("%d reports after a Bump during an Update drain, want none before the interval", got)
	}
}
