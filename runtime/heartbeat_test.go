package runtime

import (
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// heartbeatRuntime returns a runtime against f, not yet running, that
// rewrites an unchanged report every 20ms; its reports still say the
// default, 60 seconds.
func heartbeatRuntime(f *fakeSession) *Runtime {
	rt := newTestRuntime(f)
	rt.reporter.refresh = 20 * time.Millisecond
	return rt
}

// waitHeartbeats waits for n more reports after the first that satisfies
// ok, and returns that one and the n after it.
func waitHeartbeats(t *testing.T, f *fakeSession, what string, ok func(*lullv1.RuntimeReport) bool, n int) []*lullv1.RuntimeReport {
	t.Helper()
	waitReport(t, f, what, ok)
	from := f.reportCount() - 1
	waitFor(t, "heartbeats of "+what, func() bool { return f.reportCount() > from+n })
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reports[from : from+n+1]
}

// The controller judges a report it has not seen rewritten for
// 2×refreshSeconds+10s stale, and never culls the session then; so the
// report is rewritten, unchanged, in every state, the sealed and the held
// ones too, and says how often.
func TestReportIsRewrittenInEveryState(t *testing.T) {
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
			waitFor(t, "the gate to open", func() bool { return rt.Snapshot().Accepting })
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
			f.session.Status.Replacement = &lullv1.Replacement{PodUID: testPod, Reason: lullv1.ReplacementNeverStarted, CommittedAt: metav1.Now()}
		},
		want: isState(lullv1.RuntimeServing, ""),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeSession()
			if tc.before != nil {
				tc.before(f)
			}
			rt := heartbeatRuntime(f)
			runRuntime(t, rt)
			if tc.after != nil {
				tc.after(t, f, rt)
			}
			reports := waitHeartbeats(t, f, tc.name, tc.want, 3)
			for i, r := range reports {
				if !sameReport(r, reports[0]) || r.ReportedAt == nil || r.RefreshSeconds != 60 {
					t.Errorf("report %d: %+v, want %+v again, stamped, saying 60 seconds", i, r, reports[0])
				}
			}
			if got := rt.Snapshot().Accepting; got != tc.open {
				t.Errorf("gate accepting = %v after heartbeats, want %v", got, tc.open)
			}
		})
	}
}

// The heartbeat keeps time by itself: it goes on while the runtime's watch
// hears nothing (a watch that died unnoticed, an API server that stopped
// sending), which is when the controller most needs to know the runtime
// lives.
func TestHeartbeatNeedsNoWatch(t *testing.T) {
	f := newFakeSession()
	f.deaf = true
	rt := heartbeatRuntime(f)
	runRuntime(t, rt)
	waitHeartbeats(t, f, "Serving", isState(lullv1.RuntimeServing, ""), 3)
}

// A heartbeat of a Serving report the gate has already opened on is
// written without a precondition: the controller writes the Session's
// status all the time (conditions, the idle clock), and a heartbeat that
// had to match the version the runtime last saw could lose to it again and
// again, until the report went stale.
func TestHeartbeatOfAnOpenGateIsNotBlockedByConflicts(t *testing.T) {
	f := newFakeSession()
	rt := heartbeatRuntime(f)
	runRuntime(t, rt)
	waitFor(t, "the gate to open", func() bool { return rt.Snapshot().Accepting })
	f.mu.Lock()
	from := len(f.reports)
	// From now on the Session changes before every write lands, and the
	// runtime's watch does not hear of it.
	f.beforePatch = func() { f.bump() }
	f.mu.Unlock()
	waitFor(t, "heartbeats", func() bool { return f.reportCount() >= from+3 })
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, p := range f.preconditions[from:] {
		if p != "" {
			t.Errorf("heartbeat %d written with precondition %q, want none", i, p)
		}
	}
}

// A heartbeat never opens a sealed gate: a runtime whose opening report
// keeps meeting a conflict stays sealed however long it runs, and every
// Serving write it makes while sealed is conditional.
func TestHeartbeatNeverOpensASealedGate(t *testing.T) {
	f := newFakeSession()
	// The Session changes before every write lands (a controller busy with
	// it), unseen by the runtime's watch.
	f.beforePatch = func() { f.bump() }
	rt := heartbeatRuntime(f)
	runRuntime(t, rt)
	time.Sleep(200 * time.Millisecond) // ten refresh intervals
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
	for i, p := range f.preconditions {
		if p == "" {
			t.Errorf("write %d of a sealed gate's Serving report had no precondition", i)
		}
	}
	// The watch catches up: the opening report lands and the gate opens.
	f.beforePatch = nil
	f.mu.Unlock()
	f.update(func(*lullv1.SessionStatus) {})
	waitFor(t, "the gate to open once the runtime has seen the Session", func() bool { return rt.Snapshot().Accepting })
}

// A change the rate limit holds back (turns begun outside a drain) goes out
// with the next heartbeat at the latest.
func TestHeartbeatCarriesTheLatestState(t *testing.T) {
	f := newFakeSession()
	rt := newTestRuntime(f)
	rt.reporter.refresh = time.Second
	runRuntime(t, rt)
	waitFor(t, "the gate to open", func() bool { return rt.Snapshot().Accepting })
	n := f.reportCount()
	turn, err := rt.BeginTurn(TurnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer turn.End()
	time.Sleep(100 * time.Millisecond)
	if got := f.reportCount(); got != n {
		t.Errorf("a turn begun outside a drain was written at once (%d reports, want %d)", got, n)
	}
	r := waitReport(t, f, "the turn, with the heartbeat", func(r *lullv1.RuntimeReport) bool { return r.ActiveTurns == 1 })
	if r.LastActivity == nil {
		t.Errorf("report %+v, want the turn's activity", r)
	}
}

// A runtime whose session names another pod (it was replaced, and lives on
// a while) does not refresh its report: that would overwrite the report of
// the pod that replaced it.
func TestReplacedRuntimeStopsRefreshing(t *testing.T) {
	f := newFakeSession()
	rt := heartbeatRuntime(f)
	runRuntime(t, rt)
	f.requestDrain(req1, testPod)
	waitHeartbeats(t, f, "Drained", isState(lullv1.RuntimeDrained, req1), 2)
	f.update(func(s *lullv1.SessionStatus) { s.Drain, s.PodUID = nil, otherPod })
	waitFor(t, "the runtime to apply the move", func() bool { return rt.reporter.sessionMovedOn() })
	time.Sleep(30 * time.Millisecond) // a heartbeat already under way lands
	n := f.reportCount()
	time.Sleep(200 * time.Millisecond)
	if got := f.reportCount() - n; got != 0 {
		t.Errorf("the replaced runtime wrote %d reports over the new pod's", got)
	}
}

// A runtime's report says how often it is rewritten.
func TestReportsSayTheirRefresh(t *testing.T) {
	f := newFakeSession()
	rt := newRuntime(Config{SessionName: "s1", SessionNamespace: "ns", PodName: "s1-0", PodUID: testPod,
		ReportRefresh: 90 * time.Second, Logger: newTestRuntime(f).log}, f)
	runRuntime(t, rt)
	r := waitReport(t, f, "the first report", func(*lullv1.RuntimeReport) bool { return true })
	if r.RefreshSeconds != 90 || r.LastActivity != nil {
		t.Errorf("first report %+v, want refreshSeconds 90 and no activity yet", r)
	}
	if rt.reporter.refresh != 90*time.Second {
		t.Errorf("reporter refreshes every %s, want 90s", rt.reporter.refresh)
	}
}
