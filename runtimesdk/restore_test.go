package runtimesdk

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

func TestRestoredTurnsCountFromTheFirstReport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSession()
		f.session.Status.Drain = &lullv1.DrainRequest{RequestID: req1, PodUID: testPod, Reason: lullv1.DrainReasonUpdate}
		// The process that began the turns had reported Draining for them.
		f.session.Status.Runtime = &lullv1.RuntimeReport{PodUID: testPod, RequestID: req1, State: lullv1.RuntimeDraining, ActiveTurns: 3}
		now := f.clock.Now()
		records := []TurnRecord{
			{ID: "t-0000000000000001", Begun: now.Add(-3 * time.Minute)},
			{ID: "t-0000000000000002", Lease: time.Hour, LeaseDeadline: now.Add(30 * time.Minute), Begun: now.Add(-time.Minute)},
			{ID: "t-0000000000000003", Lease: time.Hour, LeaseDeadline: now.Add(-time.Minute), Begun: now.Add(-2 * time.Hour)},
		}
		rt := newTestRuntime(f)
		turns, err := rt.Restore(records)
		if err != nil {
			t.Fatal(err)
		}
		runRuntime(t, rt)
		wantReport(t, f, "a report", anyReport)
		f.mu.Lock()
		first := f.reports[0]
		f.mu.Unlock()
		if first.State != lullv1.RuntimeDraining || first.RequestID != req1 || first.ActiveTurns != 3 {
			t.Fatalf("first report after restore %+v, want Draining for %s with 3 active turns", first, req1)
		}
		if first.LastActivity == nil || !first.LastActivity.Time.Equal(records[1].Begun.Truncate(time.Second)) {
			t.Errorf("first report's last activity %v, want the latest begin %v", first.LastActivity, records[1].Begun)
		}
		for i, turn := range turns {
			if got := turn.Record(); got.ID != records[i].ID || got.Lease != records[i].Lease || !got.Begun.Equal(records[i].Begun) {
				t.Errorf("restored turn %d records %+v, want %+v", i, got, records[i])
			}
		}
		if s := rt.Snapshot(); s.LapsedTurns != 1 || s.Accepting {
			t.Errorf("after restore: %+v, want the turn whose deadline passed lapsed, and no new turns", s)
		}
		// The lapsed turn's client renews as soon as the agent listens again.
		if exp, err := turns[2].Renew(); err != nil || exp.Sub(f.clock.Now()) < 59*time.Minute {
			t.Errorf("Renew of the lapsed restored turn = %v, %v; want a full new lease", exp, err)
		}
		if s := rt.Snapshot(); s.LapsedTurns != 0 || s.ActiveTurns != 3 {
			t.Errorf("after the renewal: %+v, want 3 active, none lapsed", s)
		}
		for _, turn := range turns[:2] {
			turn.End()
		}
		synctest.Wait()
		if s := rt.Snapshot(); s.State != lullv1.RuntimeDraining {
			t.Fatalf("with one restored turn left: %+v, want Draining", s)
		}
		turns[2].End()
		r := wantReport(t, f, "Drained", isState(lullv1.RuntimeDrained, req1))
		if r.ExpiredTurns != 0 {
			t.Errorf("Drained report %+v, want no expired turn", r)
		}
	})
}

func TestRestoredLapsedTurnGetsAGraceFromTheRestore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := newFakeClock()
		g := newGate(clk)
		const lease = 40 * time.Millisecond
		restored := clk.Now()
		if _, err := g.Restore([]TurnRecord{{ID: "t-00000000000000aa", Lease: lease, LeaseDeadline: restored.Add(-time.Hour), Begun: restored.Add(-2 * time.Hour)}}); err != nil {
			t.Fatal(err)
		}
		g.SetRequest(req1, lullv1.DrainReasonUpdate)
		advance(clk, lease-time.Nanosecond)
		if s := g.Snapshot(); s.State != lullv1.RuntimeDraining || s.LapsedTurns != 1 {
			t.Fatalf("a moment before the grace from the restore ends: %+v, want Draining with the turn lapsed", s)
		}
		advance(clk, time.Nanosecond)
		if s := g.Snapshot(); s.State != lullv1.RuntimeDrained || s.ExpiredTurns != 1 {
			t.Errorf("once the grace ended: %+v, want Drained with 1 expired", s)
		}
	})
}

func TestRestoreRefuses(t *testing.T) {
	now := epoch
	good := TurnRecord{ID: "t-0123456789abcdef", Begun: now}
	for _, tc := range []struct {
		name    string
		records []TurnRecord
		want    string
	}{
		{"malformed ID", []TurnRecord{{ID: "turn-1", Begun: now}}, `turn ID "turn-1"`},
		{"upper-case ID", []TurnRecord{{ID: "t-0123456789ABCDEF", Begun: now}}, "16 hex"},
		{"short ID", []TurnRecord{{ID: "t-0123", Begun: now}}, "16 hex"},
		{"negative lease", []TurnRecord{{ID: good.ID, Lease: -time.Second, LeaseDeadline: now, Begun: now}}, "negative"},
		{"lease without deadline", []TurnRecord{{ID: good.ID, Lease: time.Second, Begun: now}}, "without a deadline"},
		{"deadline without lease", []TurnRecord{{ID: good.ID, LeaseDeadline: now, Begun: now}}, "without a lease"},
		{"no begin time", []TurnRecord{{ID: good.ID}}, "begun"},
		{"twice", []TurnRecord{good, good}, "restored twice"},
	} {
		g := NewGate()
		before := g.Snapshot()
		_, err := g.Restore(append([]TurnRecord{{ID: "t-1111111111111111", Begun: now}}, tc.records...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Restore = %v, want an error containing %q", tc.name, err, tc.want)
		}
		if after := g.Snapshot(); after != before {
			t.Errorf("%s: a refused Restore changed the gate: %+v", tc.name, after)
		}
	}

	g := NewGate()
	g.Published(lullv1.RuntimeServing)
	if _, err := g.Restore([]TurnRecord{good}); err == nil || !strings.Contains(err.Error(), "published") {
		t.Errorf("Restore after a report = %v, want refused", err)
	}
	g = NewGate()
	g.SetRequest(req1, lullv1.DrainReasonUpdate)
	if _, err := g.Restore([]TurnRecord{good}); err == nil || g.Snapshot().ActiveTurns != 0 {
		t.Errorf("Restore into a Drained gate = %v, want refused", err)
	}
}
