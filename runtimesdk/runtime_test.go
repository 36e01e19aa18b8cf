package runtimesdk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
)

func TestRunDrainsAndReopens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSession()
		var rt *Runtime
		acceptingAtServing := make(chan bool, 10)
		f.onReport = func(r *lullv1.RuntimeReport) {
			if r.State == lullv1.RuntimeServing && len(f.reports) > 1 {
				acceptingAtServing <- rt.Snapshot().Accepting
			}
		}
		rt = startRuntime(t, f)

		first := wantReport(t, f, "the startup report", anyReport)
		if first.State != lullv1.RuntimeServing || first.PodUID != testPod || first.ActiveTurns != 0 || first.RequestID != "" || first.ReportedAt == nil {
			t.Fatalf("startup report %+v, want Serving for %s with 0 turns, stamped", first, testPod)
		}
		settled(t, "the gate is open", func() bool { return rt.Snapshot().Accepting })

		turn, err := rt.BeginTurn(TurnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f.requestDrain(req1, testPod)
		r := wantReport(t, f, "Draining", isState(lullv1.RuntimeDraining, req1))
		if r.ActiveTurns != 1 {
			t.Errorf("Draining report %+v, want 1 active turn", r)
		}
		if _, err := rt.BeginTurn(TurnOptions{}); !errors.Is(err, ErrDraining) {
			t.Fatalf("BeginTurn while draining = %v, want ErrDraining", err)
		}

		// Drained is reported as soon as the last turn ends: the clock
		// does not move.
		turn.End()
		r = wantReport(t, f, "Drained", isState(lullv1.RuntimeDrained, req1))
		if r.ActiveTurns != 0 || r.LastActivity == nil {
			t.Errorf("Drained report %+v, want 0 turns and the last activity", r)
		}

		f.withdraw()
		wantReport(t, f, "Serving after withdrawal", isState(lullv1.RuntimeServing, ""))
		select {
		case accepting := <-acceptingAtServing:
			if accepting {
				t.Error("the gate accepted turns before Serving was published")
			}
		default:
			t.Fatal("no Serving report after withdrawal")
		}
		settled(t, "the gate has reopened", func() bool { return rt.Snapshot().Accepting })
		if _, err := rt.BeginTurn(TurnOptions{}); err != nil {
			t.Errorf("BeginTurn after reopening: %v", err)
		}
	})
}

func TestRunActsOnlyOnItsOwnPod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSession()
		rt := startRuntime(t, f)
		settled(t, "the gate is open", func() bool { return rt.Snapshot().Accepting })

		f.requestDrain(req1, otherPod)
		f.update(func(s *lullv1.SessionStatus) { s.Phase = lullv1.SessionDraining })
		synctest.Wait()
		if s := rt.Snapshot(); s.State != lullv1.RuntimeServing || !s.Accepting {
			t.Errorf("after a request for another pod: %+v, want Serving and accepting", s)
		}
		if n := f.reportCount(); n != 1 {
			t.Errorf("%d reports, want only the startup one", n)
		}

		f.requestDrain("update-not-hex-at-all!", testPod)
		synctest.Wait()
		if s := rt.Snapshot(); s.State != lullv1.RuntimeServing || !s.Accepting {
			t.Errorf("after a malformed request: %+v, want Serving and accepting", s)
		}
	})
}

func TestRunAppliesAnOutstandingRequestBeforeReporting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSession()
		f.session.Status.Drain = &lullv1.DrainRequest{RequestID: req1, PodUID: testPod, Reason: lullv1.DrainReasonUpdate}
		// A Drained report of an earlier process in this pod is still there.
		f.session.Status.Runtime = &lullv1.RuntimeReport{PodUID: testPod, RequestID: req1, State: lullv1.RuntimeDrained}
		rt := startRuntime(t, f)
		r := wantReport(t, f, "a report", anyReport)
		if r.State != lullv1.RuntimeDrained || r.RequestID != req1 {
			t.Errorf("first report %+v, want Drained for %s", r, req1)
		}
		if rt.Snapshot().Accepting {
			t.Error("a runtime restarted during a drain accepts turns")
		}
	})
}

func TestRunStaysSealedOnceReplaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSession()
		rt := startRuntime(t, f)
		settled(t, "the gate is open", func() bool { return rt.Snapshot().Accepting })
		f.requestDrain(req1, testPod)
		wantReport(t, f, "Drained", isState(lullv1.RuntimeDrained, req1))
		n := f.reportCount()

		// The controller deleted the pod and moved on: the request is gone, but
		// the session names another pod (or none).
		f.update(func(s *lullv1.SessionStatus) { s.Drain, s.PodUID = nil, "" })
		f.update(func(s *lullv1.SessionStatus) { s.PodUID = otherPod })
		synctest.Wait()
		if s := rt.Snapshot(); s.State != lullv1.RuntimeDrained || s.Accepting {
			t.Errorf("replaced runtime: %+v, want still Drained", s)
		}
		if f.reportCount() != n {
			t.Errorf("replaced runtime wrote %d more reports, want none", f.reportCount()-n)
		}
	})
}

// The runtime reads its Session once, at start. Whenever a watch ends it
// watches again from the last version a watch delivered (an event or a
// bookmark), without reading: the API server sends what changed since.
// Each watch here ends within minWatchLife, so the next one follows a
// step of the read backoff (200 ms, doubling, ±50 %), which the test
// waits out at its longest.
func TestRunResumesWatchesWithoutReading(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSession()
		failures := 2
		f.getErr = func() error {
			if failures > 0 {
				failures--
				return apierrors.NewServiceUnavailable("starting")
			}
			return nil
		}
		rt := startRuntime(t, f)
		advance(f.clock, 300*time.Millisecond) // the first failed read's backoff
		advance(f.clock, 600*time.Millisecond) // the second's
		watches := func(n int) {
			t.Helper()
			settled(t, fmt.Sprintf("watch %d is open", n), func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.watchers) == n })
		}
		watches(1)
		settled(t, "the gate is open", func() bool { return rt.Snapshot().Accepting })

		f.mu.Lock()
		if f.gets != 3 || f.watchRVs[0] != "1" {
			t.Errorf("gets = %d, first watch from %q; want 3 (two failed) and the Get's resourceVersion 1", f.gets, f.watchRVs[0])
		}
		if d := f.watchTimeouts[0]; d < minWatchTimeout || d >= maxWatchTimeout {
			t.Errorf("watch timeout %v, want within [%v, %v)", d, minWatchTimeout, maxWatchTimeout)
		}
		// The server closes the watch; meanwhile a request arrives that no
		// open watch delivers: the resumed watch does.
		seen := f.session.ResourceVersion // the runtime's own report, delivered
		f.watchers[0].Stop()
		f.session.Status.Drain = &lullv1.DrainRequest{RequestID: req1, PodUID: testPod, Reason: lullv1.DrainReasonUpdate}
		f.bump()
		f.mu.Unlock()
		advance(f.clock, 300*time.Millisecond)
		wantReport(t, f, "Drained from the resumed watch", isState(lullv1.RuntimeDrained, req1))
		watches(2)
		f.mu.Lock()
		if got := f.watchRVs[1]; got != seen {
			t.Errorf("resumed from %q, want the last version delivered, %q", got, seen)
		}

		// An error event: watch again from the last version.
		rv := f.session.ResourceVersion // the Drained report, delivered
		f.watchers[1].Error(&apierrors.NewInternalError(errors.New("etcd leader changed")).ErrStatus)
		f.mu.Unlock()
		advance(f.clock, 600*time.Millisecond)
		watches(3)
		f.mu.Lock()
		if got := f.watchRVs[2]; got != rv {
			t.Errorf("watch after an error from %q, want the last version delivered, %q", got, rv)
		}
		// Other objects change: the Session's watch gets a bookmark at a newer
		// version, and resumes from it.
		f.rv += 5
		f.mu.Unlock()
		f.bookmark()
		f.mu.Lock()
		bookmarked := strconv.Itoa(f.rv)
		f.watchers[2].Stop()
		f.mu.Unlock()
		advance(f.clock, 1200*time.Millisecond)
		watches(4)
		f.mu.Lock()
		defer f.mu.Unlock()
		if got := f.watchRVs[3]; got != bookmarked {
			t.Errorf("watch after a bookmark from %q, want the bookmark's version %q", got, bookmarked)
		}
		if f.gets != 3 {
			t.Errorf("gets = %d after three resumed watches, want still 3", f.gets)
		}
	})
}

// What the runtime does when a watch ends, and when.
func TestAfterWatch(t *testing.T) {
	const timeout = 40 * time.Minute
	expired := apierrors.NewResourceExpired("too old resource version: 5 (9)")
	tooLarge := apierrors.NewTimeoutError("Too large resource version", 1)
	tooLarge.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge}}
	for _, tc := range []struct {
		name  string
		err   error
		lived time.Duration
		want  watchStep
	}{
		{"closed at its timeout", nil, timeout, watchStep{fromLast, pauseNone}},
		{"closed early (API server restart)", nil, 3 * time.Minute, watchStep{fromLast, pauseSpread}},
		{"closed at once", nil, minWatchLife / 2, watchStep{fromLast, pauseBackoff}},
		{"watch request failed", apierrors.NewServiceUnavailable("down"), 0, watchStep{fromLast, pauseBackoff}},
		{"error event", apierrors.NewInternalError(errors.New("etcd")), time.Minute, watchStep{fromLast, pauseBackoff}},
		{"forbidden", apierrors.NewForbidden(schema.GroupResource{Resource: "sessions"}, "s1", errors.New("no")), 0, watchStep{fromLast, pauseBackoff}},
		{"410 Expired", expired, time.Minute, watchStep{fromNow, pauseNone}},
		{"410 Gone", apierrors.NewGone("gone"), 0, watchStep{fromNow, pauseNone}},
		{"too large resource version", tooLarge, 0, watchStep{fromNow, pauseNone}},
		{"session deleted", errSessionDeleted, time.Minute, watchStep{fromNow, pauseBackoff}},
	} {
		if got := afterWatch(tc.err, tc.lived, timeout); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// Watch timeouts are spread over [30m, 60m) in whole seconds, so a fleet's
// watches do not end together.
func TestWatchTimeout(t *testing.T) {
	seen := map[time.Duration]bool{}
	for range 200 {
		d := watchTimeout()
		if d < minWatchTimeout || d >= maxWatchTimeout || d%time.Second != 0 {
			t.Fatalf("watch timeout %v, want whole seconds within [%v, %v)", d, minWatchTimeout, maxWatchTimeout)
		}
		seen[d] = true
	}
	if len(seen) < 100 {
		t.Errorf("%d distinct timeouts in 200, want them spread", len(seen))
	}
}

func TestRunRetriesFailedReports(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSession()
		failures := 3
		f.patchErr = func(*lullv1.RuntimeReport) (error, bool) {
			if failures > 0 {
				failures--
				return apierrors.NewInternalError(errInjected), failures == 0 // the last failure landed anyway
			}
			return nil, false
		}
		rt := startRuntime(t, f)
		for range 3 { // each retry's backoff (1 ms, doubling up to 5 ms, ±50 %)
			advance(f.clock, 10*time.Millisecond)
		}
		settled(t, "the gate is open", func() bool { return rt.Snapshot().Accepting })
		f.mu.Lock()
		if failures != 0 || len(f.reports) != 2 {
			t.Errorf("failures left %d, reports %d; want 0 and 2 (one landed with an error, then the retry)", failures, len(f.reports))
		}
		f.mu.Unlock()
	})
}

// A report is written only when it changes, and changes of turn count are
// coalesced: outside a drain for the refresh (a minute here), in one for a
// second.
func TestReportsAreWrittenOnlyOnChangeAndCoalesced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSession()
		rt := startRuntime(t, f)
		settled(t, "the gate is open", func() bool { return rt.Snapshot().Accepting })

		// Outside a drain, turns and bumps are not written at once.
		var turns []*Turn
		for range 10 {
			turn, err := rt.BeginTurn(TurnOptions{})
			if err != nil {
				t.Fatal(err)
			}
			turns = append(turns, turn)
			rt.Bump()
		}
		synctest.Wait()
		if n := f.reportCount(); n != 1 {
			t.Fatalf("%d reports after 10 turns, want only the startup one", n)
		}

		// In a drain the transition is written at once, count changes at most
		// once per interval, and the last count is written in the end.
		f.requestDrain(req1, testPod)
		wantReport(t, f, "Draining", isState(lullv1.RuntimeDraining, req1))
		start := f.reportCount()
		for _, turn := range turns[:9] {
			turn.End()
		}
		advance(f.clock, drainingReportInterval-time.Nanosecond)
		if n := f.reportCount() - start; n != 0 {
			t.Errorf("%d Draining reports within the interval after 9 turns ended, want none", n)
		}
		advance(f.clock, time.Nanosecond)
		r := wantReport(t, f, "the final count, at the interval", func(r *lullv1.RuntimeReport) bool { return r.ActiveTurns == 1 })
		if r.State != lullv1.RuntimeDraining {
			t.Errorf("report %+v, want Draining", r)
		}
		if n := f.reportCount() - start; n != 1 {
			t.Errorf("%d Draining reports for the 9 turns that ended, want 1", n)
		}
		n := f.reportCount()
		turns[9].End()
		wantReport(t, f, "Drained", isState(lullv1.RuntimeDrained, req1))
		if got := f.reportCount() - n; got != 1 {
			t.Errorf("%d reports for the Drained transition, want 1", got)
		}
		f.mu.Lock()
		for i := 1; i < len(f.reports); i++ {
			if sameReport(f.reports[i-1], f.reports[i]) {
				t.Errorf("report %d repeats report %d: %+v", i, i-1, f.reports[i])
			}
		}
		f.mu.Unlock()
	})
}

func TestRunOnlyOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSession()
		rt := startRuntime(t, f)
		settled(t, "the gate is open", func() bool { return rt.Snapshot().Accepting })
		if err := rt.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "only once") {
			t.Errorf("second Run = %v, want an error", err)
		}
	})
}

func TestObserve(t *testing.T) {
	session := func(podUID types.UID, d *lullv1.DrainRequest) *lullv1.Session {
		s := &lullv1.Session{}
		s.Status.PodUID, s.Status.Drain = podUID, d
		return s
	}
	mine := &lullv1.DrainRequest{RequestID: req1, PodUID: testPod, Reason: lullv1.DrainReasonIdle}
	foreign := &lullv1.DrainRequest{RequestID: req1, PodUID: otherPod, Reason: lullv1.DrainReasonIdle}
	malformed := &lullv1.DrainRequest{RequestID: "nope", PodUID: testPod}
	for _, tc := range []struct {
		name string
		s    *lullv1.Session
		want observation
	}{
		{"request for this pod", session(testPod, mine), observation{requestID: req1, reason: lullv1.DrainReasonIdle}},
		{"request for this pod, session moved on", session(otherPod, mine), observation{requestID: req1, reason: lullv1.DrainReasonIdle}},
		{"no request", session(testPod, nil), observation{}},
		{"request for another pod", session(testPod, foreign), observation{}},
		{"no request, another pod", session(otherPod, nil), observation{keep: true}},
		{"no request, no pod", session("", nil), observation{keep: true}},
		{"malformed request", session(testPod, malformed), observation{ignored: "x"}},
	} {
		got := observe(tc.s, testPod)
		if (got.ignored != "") != (tc.want.ignored != "") {
			t.Errorf("%s: ignored = %q", tc.name, got.ignored)
		}
		got.ignored, tc.want.ignored = "", ""
		if got != tc.want {
			t.Errorf("%s: observe = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// A report someone else overwrote (an admin, a stale writer) is written
// again, so a Drained answer lost that way does not leave the drain waiting
// forever; versions from before the runtime's own write, which a watch
// delivers after the write returned, are not mistaken for an overwrite.
func TestRunReassertsAnOverwrittenReport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSession()
		rt := newTestRuntime(f)
		rt.reporter.reassert = backoff{initial: 10 * time.Millisecond, max: 20 * time.Millisecond}
		runRuntime(t, rt)
		id := drain.RequestID(testPod, lullv1.DrainReasonUpdate, 1)
		f.requestDrain(id, testPod)
		wantReport(t, f, "Drained", isState(lullv1.RuntimeDrained, id))
		writes := f.reportCount()

		// A stale version, older than the write: not an overwrite, not even
		// once the longest pause before a rewrite has passed.
		f.mu.Lock()
		stale := f.session.DeepCopy()
		stale.ResourceVersion = "1"
		stale.Status.Runtime = &lullv1.RuntimeReport{PodUID: testPod, State: lullv1.RuntimeServing}
		for _, w := range f.watchers {
			w.Modify(stale)
		}
		f.mu.Unlock()
		synctest.Wait()
		advance(f.clock, 30*time.Millisecond)
		if got := f.reportCount(); got != writes {
			t.Fatalf("a version older than the runtime's write caused %d more writes", got-writes)
		}

		// An overwrite: a forged Draining report in a newer version.
		f.update(func(s *lullv1.SessionStatus) {
			s.Runtime = &lullv1.RuntimeReport{PodUID: testPod, RequestID: id, State: lullv1.RuntimeDraining, ActiveTurns: 3}
		})
		synctest.Wait()
		advance(f.clock, 30*time.Millisecond) // the pause before the rewrite (10 ms, ±50 %)
		settled(t, "the Drained report is written again", func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			r := f.session.Status.Runtime
			return r != nil && r.State == lullv1.RuntimeDrained && r.RequestID == id
		})
	})
}

// After an API server restart its watch window starts at the current
// revision, and a Session not written since is older: a watch from the
// Session's own version fails with 410 Expired however often it is read
// again. The runtime then watches from the current state, at once, so it
// does not miss a drain request while it backs off.
func TestRunWatchesFromNowWhenItsVersionIsTooOld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSession()
		f.oldestWatchable = 1000
		startRuntime(t, f)
		wantReport(t, f, "the first report", func(r *lullv1.RuntimeReport) bool { return r.State == lullv1.RuntimeServing })
		id := drain.RequestID(testPod, lullv1.DrainReasonUpdate, 1)
		settled(t, "a watch from the current state", func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return slices.Contains(f.watchRVs, "")
		})
		f.requestDrain(id, testPod)
		wantReport(t, f, "Drained", isState(lullv1.RuntimeDrained, id))
	})
}

// errorLog counts the records at level Error a runtime logs.
type errorLog struct{ n *atomic.Int64 }

func (h errorLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }
func (h errorLog) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h errorLog) WithGroup(string) slog.Handler                { return h }
func (h errorLog) Handle(context.Context, slog.Record) error    { h.n.Add(1); return nil }

// The first report is written at once, and it is the gate's state. At
// start the reporter has two things to wake for, the gate's first
// snapshot and the report the runtime read from its Session; it must not
// write before it has the snapshot (a report with no state, which
// drain.EncodeReport refuses, and whose retry would hold the first report
// and the gate's opening back by the backoff). Either may wake it first,
// so the runtime is started twenty times.
func TestFirstReportIsWrittenAtOnce(t *testing.T) {
	for range 20 {
		synctest.Test(t, func(t *testing.T) {
			f := newFakeSession()
			var errs atomic.Int64
			cfg := testConfig(f)
			cfg.Logger = slog.New(errorLog{&errs})
			rt := newRuntime(cfg, f)
			runRuntime(t, rt)
			synctest.Wait() // the runtime's clock does not move
			if r := f.lastReport(); r == nil || r.State != lullv1.RuntimeServing || !rt.Snapshot().Accepting {
				t.Fatalf("first report %s, gate %+v: want Serving written, and the gate open, before the clock moves", describeReport(r), rt.Snapshot())
			}
			if n := errs.Load(); n != 0 {
				t.Errorf("the runtime logged %d errors while it started", n)
			}
		})
	}
}
