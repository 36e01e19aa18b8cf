package runtimesdk

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// shortRefresh is the refresh bound of the runtimes of these tests.
const shortRefresh = 20 * time.Millisecond

// shortRefreshRuntime returns a runtime against f, not yet running, that
// leaves a change of activity unwritten for 20ms at most; its reports
// still say the default, 60 seconds.
func shortRefreshRuntime(f *fakeSession) *Runtime {
	rt := newTestRuntime(f)
	rt.reporter.refresh = shortRefresh
	return rt
}

// quiet fails the test if the runtime makes any API request (read, watch
// or status patch) while its clock moves on by ten refresh intervals, one
// at a time.
func quiet(t *testing.T, f *fakeSession, what string) {
	t.Helper()
	synctest.Wait()
	n := f.requests()
	for range 10 {
		advance(f.clock, shortRefresh)
	}
	if got := f.requests() - n; got != 0 {
		t.Errorf("%s: %d API requests over %s (ten refresh intervals), want none", what, got, 10*shortRefresh)
	}
}

// An idle runtime costs no API request once its report is written, in
// every state, the sealed and the held ones too: nothing it reports has
// changed, and the controller needs no heartbeat (a cull is a drain that
// only a live runtime answers). Every report says the refresh bound.
func TestIdleRuntimeMakesNoRequestAfterItsReport(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before func(f *fakeSession)                            // before the runtime starts
		after  func(t *testing.T, f *fakeSession, rt *Runtime) // once it runs
		want   func(*lullv1.RuntimeReport) bool
		open   bool // the gate accepts turns in this state
	}{{
		name: "Serving",
		want: isState(lullv1.RuntimeServing, ""),
		open: true,
	}, {
		name: "Draining",
		after: func(t *testing.T, f *fakeSession, rt *Runtime) {
			settled(t, "the gate is open", func() bool { return rt.Snapshot().Accepting })
			if _, err := rt.BeginTurn(TurnOptions{}); err != nil { // never ended
				t.Fatal(err)
			}
			f.requestDrain(req1, testPod)
		},
		want: func(r *lullv1.RuntimeReport) bool {
			return isState(lullv1.RuntimeDraining, req1)(r) && r.ActiveTurns == 1
		},
	}, {
		name:  "Drained",
		after: func(_ *testing.T, f *fakeSession, _ *Runtime) { f.requestDrain(req1, testPod) },
		want:  isState(lullv1.RuntimeDrained, req1),
	}, {
		// Committed before the runtime started: it reports, and never opens.
		name: "held by a committed replacement",
		before: func(f *fakeSession) {
			f.session.Status.Replacement = &lullv1.Replacement{PodUID: testPod, Reason: lullv1.ReplacementNeverStarted, CommittedAt: metav1.NewTime(f.clock.Now())}
		},
		want: isState(lullv1.RuntimeServing, ""),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeSession()
				if tc.before != nil {
					tc.before(f)
				}
				rt := shortRefreshRuntime(f)
				runRuntime(t, rt)
				if tc.after != nil {
					tc.after(t, f, rt)
				}
				r := wantReport(t, f, tc.name, tc.want)
				if r.ReportedAt == nil || r.RefreshSeconds != 60 {
					t.Errorf("report %+v: want it stamped, saying 60 seconds", r)
				}
				settled(t, "the report is published", func() bool { return rt.Snapshot().Accepting == tc.open })
				quiet(t, f, tc.name)
				if got := rt.Snapshot().Accepting; got != tc.open {
					t.Errorf("gate accepting = %v, want %v", got, tc.open)
				}
			})
		})
	}
}

// A coalesced change goes out by the reporter's own clock: it needs no
// watch event (a watch that died unnoticed, an API server that stopped
// sending), and it is written once.
func TestActivityIsWrittenWithoutTheWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSession()
		f.deaf = true
		rt := shortRefreshRuntime(f)
		runRuntime(t, rt)
		first := wantReport(t, f, "Serving", isState(lullv1.RuntimeServing, ""))
		if first.LastActivity != nil {
			t.Fatalf("first report %+v: no activity yet", first)
		}
		rt.Bump()
		advance(f.clock, shortRefresh)
		wantReport(t, f, "the bump, a refresh later", func(r *lullv1.RuntimeReport) bool { return r.LastActivity != nil })
		quiet(t, f, "after the bump was written")
		if n := f.reportCount(); n != 2 {
			t.Errorf("%d reports, want 2: the first and the bump", n)
		}
	})
}

// A busy runtime writes at most once per refresh for activity alone, and
// what it writes is never older than a refresh: the granularity of
// activity the idle policy sees.
func TestBusyRuntimeWritesAtMostOncePerRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const refresh = 100 * time.Millisecond
		f := newFakeSession()
		var landed []time.Time
		f.onReport = func(*lullv1.RuntimeReport) { landed = append(landed, f.clock.Now()) } // f.mu is held
		rt := newTestRuntime(f)
		rt.reporter.refresh = refresh
		runRuntime(t, rt)
		settled(t, "the gate is open", func() bool { return rt.Snapshot().Accepting })
		start := f.clock.Now()
		for f.clock.Since(start) < time.Second {
			turn, err := rt.BeginTurn(TurnOptions{})
			if err != nil {
				t.Fatal(err)
			}
			advance(f.clock, 2*time.Millisecond)
			turn.End()
		}
		lastTurn := f.clock.Now()
		advance(f.clock, refresh)
		wantReport(t, f, "the last turn's end, a refresh after it", func(r *lullv1.RuntimeReport) bool {
			return r.ActiveTurns == 0 && r.LastActivity != nil && !r.LastActivity.Time.Before(lastTurn.Truncate(time.Second))
		})
		f.mu.Lock()
		defer f.mu.Unlock()
		// The first report opened the gate; the rest carry activity.
		busy := landed[1:]
		if len(busy) < 3 || len(busy) > 12 {
			t.Errorf("%d writes for a second of turns with a %v refresh, want about ten", len(busy), refresh)
		}
		for i := 1; i < len(busy); i++ {
			if gap := busy[i].Sub(busy[i-1]); gap < refresh {
				t.Errorf("writes %d and %d only %v apart, want a refresh (%v)", i-1, i, gap, refresh)
			}
		}
	})
}

// A coalesced write of a Serving report the gate has already opened on is
// made without a precondition: the controller writes the Session's status
// all the time (conditions, the idle clock), and a write that had to match
// the version the runtime last saw could lose to it again and again.
func TestCoalescedWriteOfAnOpenGateIsNotBlockedByConflicts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSession()
		rt := shortRefreshRuntime(f)
		runRuntime(t, rt)
		settled(t, "the gate is open", func() bool { return rt.Snapshot().Accepting })
		f.mu.Lock()
		from := len(f.reports)
		// From now on the Session changes before every write lands, and the
		// runtime's watch does not hear of it.
		f.beforePatch = func() { f.bump() }
		f.mu.Unlock()
		for i := range 3 {
			turn, err := rt.BeginTurn(TurnOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer turn.End()
			advance(f.clock, shortRefresh)
			settled(t, "the turn is written", func() bool { return f.reportCount() >= from+i+1 })
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		for i, p := range f.preconditions[from:] {
			if p != "" {
				t.Errorf("write %d written with precondition %q, want none", i, p)
			}
		}
	})
}

// Retries never open a sealed gate: a runtime whose opening report keeps
// meeting a conflict stays sealed however long it runs, and every Serving
// write it makes while sealed is conditional.
func TestRetriesNeverOpenASealedGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSession()
		// The Session changes before every write lands (a controller busy with
		// it), unseen by the runtime's watch.
		f.beforePatch = func() { f.bump() }
		rt := shortRefreshRuntime(f)
		runRuntime(t, rt)
		for range 20 { // twenty retries at least (1 ms, doubling up to 5 ms, ±50 %)
			advance(f.clock, 10*time.Millisecond)
		}
		if s := rt.Snapshot(); s.Accepting {
			t.Fatalf("gate open although no opening report landed: %+v", s)
		}
		if _, err := rt.BeginTurn(TurnOptions{}); !errors.Is(err, ErrDraining) {
			t.Errorf("BeginTurn on a sealed gate = %v, want ErrDraining", err)
		}
		f.mu.Lock()
		if len(f.reports) != 0 {
			t.Errorf("%d reports landed, want none", len(f.reports))
		}
		if len(f.preconditions) < 2 {
			t.Errorf("%d writes, want the refused opening report retried", len(f.preconditions))
		}
		for i, p := range f.preconditions {
			if p == "" {
				t.Errorf("write %d of a sealed gate's Serving report had no precondition", i)
			}
		}
		// The watch catches up: the opening report lands and the gate opens.
		f.beforePatch = nil
		f.mu.Unlock()
		f.update(func(*lullv1.SessionStatus) {})
		advance(f.clock, 10*time.Millisecond) // the retry under way
		settled(t, "the gate opens once the runtime has seen the Session", func() bool { return rt.Snapshot().Accepting })
	})
}

// A change outside a drain (a turn begun) soon after the last write is
// not written at once but within the refresh, with the latest state.
func TestActivityIsWrittenWithinARefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const refresh = time.Second
		f := newFakeSession()
		rt := newTestRuntime(f)
		rt.reporter.refresh = refresh
		runRuntime(t, rt)
		settled(t, "the gate is open", func() bool { return rt.Snapshot().Accepting })
		n := f.reportCount()
		turn, err := rt.BeginTurn(TurnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer turn.End()
		advance(f.clock, refresh-time.Nanosecond)
		if got := f.reportCount(); got != n {
			t.Errorf("a turn begun outside a drain, just after a write, was written before the refresh (%d reports, want %d)", got, n)
		}
		advance(f.clock, time.Nanosecond)
		r := wantReport(t, f, "the turn, at the refresh", func(r *lullv1.RuntimeReport) bool { return r.ActiveTurns == 1 })
		if r.LastActivity == nil {
			t.Errorf("report %+v, want the turn's activity", r)
		}
	})
}

// A runtime whose session names another pod (it was replaced, and lives on
// a while) writes nothing more, activity or not: a report would overwrite
// the report of the pod that replaced it. Named again, it reports what it
// held back.
func TestReplacedRuntimeWritesNoMore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSession()
		rt := shortRefreshRuntime(f)
		runRuntime(t, rt)
		f.requestDrain(req1, testPod)
		wantReport(t, f, "Drained", isState(lullv1.RuntimeDrained, req1))
		f.update(func(s *lullv1.SessionStatus) { s.Drain, s.PodUID = nil, otherPod })
		settled(t, "the runtime has applied the move", func() bool { return rt.reporter.sessionMovedOn() })
		n := f.reportCount()
		rt.Bump()
		rt.BeginTurn(TurnOptions{}) //nolint:errcheck // refused: sealed
		for range 10 {
			advance(f.clock, shortRefresh)
		}
		if got := f.reportCount() - n; got != 0 {
			t.Errorf("the replaced runtime wrote %d reports over the new pod's", got)
		}
		f.update(func(s *lullv1.SessionStatus) { s.PodUID = testPod })
		// The held-back activity may go out first, in a Drained report;
		// the opening Serving report after it then meets a conflict with
		// that write and is retried after the backoff.
		advance(f.clock, 10*time.Millisecond)
		wantReport(t, f, "the held-back report, once named again", func(r *lullv1.RuntimeReport) bool {
			return r.PodUID == testPod && r.State == lullv1.RuntimeServing && r.LastActivity != nil
		})
	})
}

// A runtime's report says its refresh bound.
func TestReportsSayTheirRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSession()
		cfg := testConfig(f)
		cfg.ReportRefresh = 90 * time.Second
		rt := newRuntime(cfg, f)
		runRuntime(t, rt)
		r := wantReport(t, f, "the first report", anyReport)
		if r.RefreshSeconds != 90 || r.LastActivity != nil {
			t.Errorf("first report %+v, want refreshSeconds 90 and no activity yet", r)
		}
		if rt.reporter.refresh != 90*time.Second {
			t.Errorf("reporter coalesces over %s, want 90s", rt.reporter.refresh)
		}
	})
}

// When a report that differs from the one written may be written.
func TestDue(t *testing.T) {
	r := &reporter{refresh: time.Minute, drainingInterval: time.Second}
	w := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { v := metav1.NewTime(w.Add(d)); return &v }
	serving := &lullv1.RuntimeReport{PodUID: testPod, State: lullv1.RuntimeServing, LastActivity: at(0), RefreshSeconds: 60}
	draining := &lullv1.RuntimeReport{PodUID: testPod, State: lullv1.RuntimeDraining, RequestID: req1, ActiveTurns: 2, LastActivity: at(0), RefreshSeconds: 60}
	with := func(base *lullv1.RuntimeReport, edit func(*lullv1.RuntimeReport)) *lullv1.RuntimeReport {
		c := base.DeepCopy()
		edit(c)
		return c
	}
	var atOnce time.Time
	for _, tc := range []struct {
		name          string
		want, written *lullv1.RuntimeReport
		reason        lullv1.DrainReason
		due           time.Time
	}{
		{"nothing written yet", serving, nil, "", atOnce},
		{"new state", draining, serving, lullv1.DrainReasonUpdate, atOnce},
		{"new request", with(draining, func(r *lullv1.RuntimeReport) { r.RequestID = "other" }), draining, lullv1.DrainReasonUpdate, atOnce},
		{"an expired turn", with(serving, func(r *lullv1.RuntimeReport) { r.ExpiredTurns = 1 }), serving, "", atOnce},
		{"new refresh bound", with(serving, func(r *lullv1.RuntimeReport) { r.RefreshSeconds = 5 }), serving, "", atOnce},
		{"activity while serving: coalesced over the refresh", with(serving, func(r *lullv1.RuntimeReport) { r.LastActivity = at(3 * time.Second) }), serving, "", w.Add(time.Minute)},
		{"a turn while serving: coalesced over the refresh", with(serving, func(r *lullv1.RuntimeReport) { r.ActiveTurns = 1 }), serving, "", w.Add(time.Minute)},
		{"a turn ends during a drain: a second", with(draining, func(r *lullv1.RuntimeReport) { r.ActiveTurns = 1 }), draining, lullv1.DrainReasonUpdate, w.Add(time.Second)},
		{"activity during an Idle drain: at once", with(draining, func(r *lullv1.RuntimeReport) { r.LastActivity = at(time.Second) }), draining, lullv1.DrainReasonIdle, atOnce},
		{"activity during an Update drain: a second", with(draining, func(r *lullv1.RuntimeReport) { r.LastActivity = at(time.Second) }), draining, lullv1.DrainReasonUpdate, w.Add(time.Second)},
	} {
		if got := r.due(tc.want, tc.written, w, tc.reason); !got.Equal(tc.due) {
			t.Errorf("%s: due %v, want %v", tc.name, got, tc.due)
		}
	}
	// A refresh bound shorter than the drain's second bounds a drain too.
	r.refresh = 200 * time.Millisecond
	if got := r.due(with(draining, func(r *lullv1.RuntimeReport) { r.ActiveTurns = 1 }), draining, w, lullv1.DrainReasonUpdate); !got.Equal(w.Add(200 * time.Millisecond)) {
		t.Errorf("drain, refresh 200ms: due %v, want 200ms after the write", got)
	}
}
