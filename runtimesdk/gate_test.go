package runtimesdk

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/clock"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

const (
	req1 = "update-0123456789abcdef"
	req2 = "update-fedcba9876543210"
)

// openGate returns a gate on clk that has published Serving.
func openGate(t *testing.T, clk clock.WithDelayedExecution) *Gate {
	t.Helper()
	g := newGate(clk)
	g.Published(lullv1.RuntimeServing)
	if !g.Snapshot().Accepting {
		t.Fatal("gate does not accept turns after Published(Serving)")
	}
	return g
}

func TestNewGateRefusesTurnsUntilServingPublished(t *testing.T) {
	g := NewGate()
	s := g.Snapshot()
	if s.State != lullv1.RuntimeServing || s.Accepting {
		t.Fatalf("new gate: %+v, want Serving and not accepting", s)
	}
	_, err := g.BeginTurn(TurnOptions{})
	var de *DrainingError
	if !errors.Is(err, ErrDraining) || !errors.As(err, &de) || !de.Starting {
		t.Fatalf("BeginTurn on a new gate = %v, want a starting DrainingError", err)
	}
	if want := "session runtime is starting: retry after reconnect"; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	for _, s := range []lullv1.RuntimeState{lullv1.RuntimeDraining, lullv1.RuntimeDrained} {
		g.Published(s)
		if g.Snapshot().Accepting {
			t.Fatalf("Published(%s) opened a new gate", s)
		}
	}
	g.Published(lullv1.RuntimeServing)
	turn, err := g.BeginTurn(TurnOptions{})
	if err != nil {
		t.Fatalf("BeginTurn after Published(Serving): %v", err)
	}
	turn.End()
}

// step is one operation on a gate and what the gate must look like after.
type step struct {
	do   string // begin, refuse, end <n>, request <id>, withdraw, publish <state>, bump
	want Snapshot
}

func TestGateTransitions(t *testing.T) {
	serving := func(active int, accepting bool) Snapshot {
		return Snapshot{State: lullv1.RuntimeServing, ActiveTurns: active, Accepting: accepting}
	}
	draining := func(id string, active int) Snapshot {
		return Snapshot{State: lullv1.RuntimeDraining, RequestID: id, Reason: lullv1.DrainReasonUpdate, ActiveTurns: active}
	}
	drained := func(id string) Snapshot {
		return Snapshot{State: lullv1.RuntimeDrained, RequestID: id, Reason: lullv1.DrainReasonUpdate}
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{{
		name: "request with no turn active drains at once",
		steps: []step{
			{"request " + req1, drained(req1)},
			{"refuse", drained(req1)},
		},
	}, {
		name: "turns finish, then the gate seals",
		steps: []step{
			{"begin", serving(1, true)},
			{"begin", serving(2, true)},
			{"request " + req1, draining(req1, 2)},
			{"refuse", draining(req1, 2)},
			{"end 0", draining(req1, 1)},
			{"end 0", draining(req1, 1)}, // End is idempotent
			{"publish Serving", draining(req1, 1)},
			{"end 1", drained(req1)},
			{"refuse", drained(req1)},
		},
	}, {
		name: "drained reopens only after Serving is published",
		steps: []step{
			{"request " + req1, drained(req1)},
			{"publish Drained", drained(req1)},
			{"publish Serving", drained(req1)}, // still requested: stays sealed
			{"withdraw", serving(0, false)},
			{"refuse", serving(0, false)},
			{"publish Drained", serving(0, false)},
			{"publish Serving", serving(0, true)},
			{"begin", serving(1, true)},
		},
	}, {
		name: "withdrawn while draining: turns go on, new ones wait for Serving",
		steps: []step{
			{"begin", serving(1, true)},
			{"request " + req1, draining(req1, 1)},
			{"withdraw", serving(1, false)},
			{"refuse", serving(1, false)},
			{"publish Serving", serving(1, true)},
			{"begin", serving(2, true)},
			{"end 0", serving(1, true)},
		},
	}, {
		name: "a new request replaces the one being drained",
		steps: []step{
			{"begin", serving(1, true)},
			{"request " + req1, draining(req1, 1)},
			{"request " + req2, draining(req2, 1)},
			{"end 0", drained(req2)},
			{"request " + req1, drained(req1)},
		},
	}, {
		name: "the same request again changes nothing",
		steps: []step{
			{"request " + req1, drained(req1)},
			{"request " + req1, drained(req1)},
			{"withdraw", serving(0, false)},
			{"withdraw", serving(0, false)},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			g := openGate(t, newFakeClock())
			var turns []*Turn
			for i, s := range tc.steps {
				before := g.Snapshot()
				verb, arg, _ := strings.Cut(s.do, " ")
				switch verb {
				case "begin":
					turn, err := g.BeginTurn(TurnOptions{})
					if err != nil {
						t.Fatalf("step %d (%s): %v", i, s.do, err)
					}
					turns = append(turns, turn)
				case "refuse":
					if _, err := g.BeginTurn(TurnOptions{}); !errors.Is(err, ErrDraining) {
						t.Fatalf("step %d (%s): BeginTurn = %v, want ErrDraining", i, s.do, err)
					}
				case "end":
					turns[int(arg[0]-'0')].End()
				case "request":
					g.SetRequest(arg, lullv1.DrainReasonUpdate)
				case "withdraw":
					g.SetRequest("", "")
				case "publish":
					g.Published(lullv1.RuntimeState(arg))
				}
				got := g.Snapshot()
				if got.State != s.want.State || got.RequestID != s.want.RequestID || got.Reason != s.want.Reason ||
					got.ActiveTurns != s.want.ActiveTurns || got.Accepting != s.want.Accepting {
					t.Fatalf("step %d (%s): gate = %+v, want %+v", i, s.do, got, s.want)
				}
				if (verb == "refuse") && got.Seq != before.Seq {
					t.Errorf("step %d (%s): a refused turn changed the gate", i, s.do)
				}
			}
		})
	}
}

func TestDrainingErrorNamesTheDrain(t *testing.T) {
	for reason, phrase := range map[lullv1.DrainReason]string{
		lullv1.DrainReasonUpdate:    "session is draining for an update (request " + req1 + "): retry after reconnect",
		lullv1.DrainReasonIdle:      "session is being suspended for inactivity (request " + req1 + "); this attempt counts as activity: retry the turn in a moment",
		lullv1.DrainReasonLifetime:  "maximum lifetime",
		lullv1.DrainReasonManual:    "on request",
		lullv1.DrainReasonNodeDrain: "its node is being drained",
	} {
		advice := ": retry after reconnect"
		if reason == lullv1.DrainReasonIdle {
			// The same pod serves again once the request is withdrawn.
			advice = ": retry the turn in a moment"
		}
		g := openGate(t, newFakeClock())
		turn, _ := g.BeginTurn(TurnOptions{})
		g.SetRequest(req1, reason)
		_, err := g.BeginTurn(TurnOptions{})
		var de *DrainingError
		if !errors.As(err, &de) || de.State != lullv1.RuntimeDraining || de.RequestID != req1 || de.Reason != reason {
			t.Fatalf("%s: BeginTurn = %#v, want a DrainingError for %s", reason, err, req1)
		}
		if !strings.Contains(err.Error(), phrase) || !strings.HasSuffix(err.Error(), advice) {
			t.Errorf("%s: error %q, want it to contain %q and end with the retry advice", reason, err, phrase)
		}
		turn.End()
		if _, err := g.BeginTurn(TurnOptions{}); !errors.As(err, &de) || de.State != lullv1.RuntimeDrained {
			t.Errorf("%s: BeginTurn once drained = %v, want a Drained DrainingError", reason, err)
		}
	}
	g := openGate(t, newFakeClock())
	g.SetRequest(req1, lullv1.DrainReasonUpdate)
	g.SetRequest("", "")
	if _, err := g.BeginTurn(TurnOptions{}); err == nil || !strings.Contains(err.Error(), "reopening") {
		t.Errorf("BeginTurn while reopening = %v, want a reopening error", err)
	}
}

func TestActivityCountsOnlyRealTurns(t *testing.T) {
	clk := newFakeClock()
	g := openGate(t, clk)
	if !g.Snapshot().LastActivity.IsZero() {
		t.Fatal("a new gate has activity")
	}
	// since reports whether the last activity is at t0 or later; the
	// clock is moved on before each t0 is taken, so that only activity
	// recorded after it counts.
	since := func(t0 time.Time) bool { return !g.Snapshot().LastActivity.Before(t0) }

	t0 := clk.Now()
	turn, _ := g.BeginTurn(TurnOptions{Lease: time.Hour})
	if !since(t0) {
		t.Error("BeginTurn did not record activity")
	}
	mark := g.Snapshot().LastActivity
	clk.Step(2 * time.Millisecond)
	if _, err := turn.Renew(); err != nil {
		t.Fatal(err)
	}
	g.Snapshot()
	if got := g.Snapshot().LastActivity; !got.Equal(mark) {
		t.Error("Renew or Snapshot recorded activity")
	}
	t1 := clk.Now()
	turn.End()
	if !since(t1) {
		t.Error("End did not record activity")
	}
	mark = g.Snapshot().LastActivity
	clk.Step(2 * time.Millisecond)
	turn.End()
	g.SetRequest(req1, lullv1.DrainReasonUpdate)
	g.BeginTurn(TurnOptions{}) //nolint:errcheck // refused
	if got := g.Snapshot().LastActivity; !got.Equal(mark) {
		t.Error("a second End, a drain request or a refused turn recorded activity")
	}
	clk.Step(2 * time.Millisecond)
	t2 := clk.Now()
	g.Bump()
	if !since(t2) {
		t.Error("Bump did not record activity")
	}
}

func TestSubscribe(t *testing.T) {
	g := openGate(t, newFakeClock())
	ch, cancel := g.Subscribe()
	first := <-ch
	if first != g.Snapshot() {
		t.Fatalf("first snapshot %+v, want the current one %+v", first, g.Snapshot())
	}
	for range 10 {
		g.Bump()
	}
	turn, _ := g.BeginTurn(TurnOptions{})
	got := <-ch
	if want := g.Snapshot(); got != want {
		t.Errorf("after 11 changes read %+v, want only the latest %+v", got, want)
	}
	select {
	case s := <-ch:
		t.Errorf("a stale snapshot followed the latest: %+v", s)
	default:
	}
	turn.End()
	if s := <-ch; s.ActiveTurns != 0 {
		t.Errorf("snapshot after End: %+v", s)
	}
	cancel()
	cancel()
	g.Bump()
	if _, ok := <-ch; ok {
		t.Error("channel delivered after cancel")
	}
}
