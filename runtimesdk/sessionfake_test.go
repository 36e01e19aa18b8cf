package runtimesdk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
)

const (
	testPod  types.UID = "pod-uid-1"
	otherPod types.UID = "pod-uid-2"
)

// fakeSession is a sessionAPI over one Session held in memory. Every status
// patch must be a report drain.DecodeReport accepts; it replaces
// status.runtime.
type fakeSession struct {
	// clock is the time of the runtimes the test runs against the
	// session (see newTestRuntime): it stands still until the test moves
	// it.
	clock *clocktesting.FakeClock

	mu       sync.Mutex
	session  *lullv1.Session
	rv       int
	watchers []*watch.RaceFreeFakeWatcher
	watchRVs []string
	// watchTimeouts holds the timeout each watch asked for.
	watchTimeouts []time.Duration
	gets          int
	reports       []*lullv1.RuntimeReport
	// preconditions holds the resourceVersion precondition of every patch
	// ("" for none).
	preconditions []string

	// Hooks, set before Run. getErr and patchErr, when they return an
	// error, fail the call; patchErr may also say the patch landed anyway.
	getErr   func() error
	patchErr func(r *lullv1.RuntimeReport) (err error, landed bool)
	// onReport runs, with fakeSession.mu held, when a report lands.
	onReport func(r *lullv1.RuntimeReport)
	// beforePatch runs, with fakeSession.mu held, as a status patch
	// arrives, before its precondition is checked.
	beforePatch func()
	// deaf, when set, keeps the runtime's own reports from its watches, as
	// when its watch has died unnoticed.
	deaf bool
	// oldestWatchable, when set, is the oldest resourceVersion a watch may
	// start from, as after an API server restart: a watch from an older one
	// gets a 410 Expired event. A watch from "" starts with the current
	// Session as an ADDED event; one from a version older than the current
	// one starts with the current Session as a MODIFIED event (the fake
	// keeps only the latest version: the changes since, in one).
	oldestWatchable int
	// gone, when set, means the Session does not exist (deleted, not yet
	// created again): Get answers NotFound and a watch from "" sends
	// nothing until it is created (see deleteSession, createAgain).
	gone bool
}

func newFakeSession() *fakeSession {
	return &fakeSession{
		clock: newFakeClock(),
		session: &lullv1.Session{
			ObjectMeta: metav1.ObjectMeta{Name: "s1", Namespace: "ns", ResourceVersion: "1"},
			Status:     lullv1.SessionStatus{PodUID: testPod, Phase: lullv1.SessionRunning},
		},
		rv: 1,
	}
}

func (f *fakeSession) Get(context.Context) (*lullv1.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gets++
	if f.gone {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: "lull.dev", Resource: "sessions"}, f.session.Name)
	}
	if f.getErr != nil {
		if err := f.getErr(); err != nil {
			return nil, err
		}
	}
	return f.session.DeepCopy(), nil
}

func (f *fakeSession) Watch(_ context.Context, rv string, timeout time.Duration) (watch.Interface, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := watch.NewRaceFreeFake()
	f.watchRVs = append(f.watchRVs, rv)
	f.watchTimeouts = append(f.watchTimeouts, timeout)
	n, _ := strconv.Atoi(rv)
	switch {
	case rv != "" && f.oldestWatchable > 0 && n < f.oldestWatchable:
		status := apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %s (%d)", rv, f.oldestWatchable)).ErrStatus
		w.Error(&status)
		return w, nil
	case rv == "" && f.gone:
	case rv == "":
		w.Add(f.session.DeepCopy())
	case n < f.rv && !f.deaf:
		w.Modify(f.session.DeepCopy())
	}
	f.watchers = append(f.watchers, w)
	return w, nil
}

// bookmark sends a bookmark at the latest version (f.rv: other objects
// may have moved it past the Session's) to the open watches.
func (f *fakeSession) bookmark() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.watchers {
		w.Action(watch.Bookmark, &lullv1.Session{ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.Itoa(f.rv)}})
	}
}

// requests returns how many API requests the runtime has made: reads,
// watches and status patches (those refused included).
func (f *fakeSession) requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets + len(f.watchRVs) + len(f.preconditions)
}

func (f *fakeSession) PatchStatus(_ context.Context, patch []byte, resourceVersion string) (string, error) {
	r, err := drain.DecodeReport(patch)
	if err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.preconditions = append(f.preconditions, resourceVersion)
	if f.beforePatch != nil {
		f.beforePatch()
	}
	if resourceVersion != "" && resourceVersion != f.session.ResourceVersion {
		return "", apierrors.NewConflict(schema.GroupResource{Group: "lull.dev", Resource: "sessions"}, f.session.Name, errors.New("the object has been modified"))
	}
	if f.patchErr != nil {
		if err, landed := f.patchErr(r); err != nil {
			if landed {
				f.land(r)
			}
			return "", err
		}
	}
	f.land(r)
	return strconv.Itoa(f.rv), nil
}

func (f *fakeSession) land(r *lullv1.RuntimeReport) {
	f.reports = append(f.reports, r)
	f.session.Status.Runtime = r
	f.bump()
	// The API server sends every change to the open watches, the
	// runtime's own writes included.
	for _, w := range f.watchers {
		if !f.deaf {
			w.Modify(f.session.DeepCopy())
		}
	}
	if f.onReport != nil {
		f.onReport(r)
	}
}

// bump makes a new version of the session. f.mu is held.
func (f *fakeSession) bump() {
	f.rv++
	f.session.ResourceVersion = strconv.Itoa(f.rv)
}

// update changes the session as the controller would and sends the new
// version to open watches.
func (f *fakeSession) update(change func(*lullv1.SessionStatus)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(&f.session.Status)
	f.bump()
	for _, w := range f.watchers {
		w.Modify(f.session.DeepCopy())
	}
}

// deleteSession deletes the Session: open watches get a DELETED event, and
// until createAgain it does not exist.
func (f *fakeSession) deleteSession() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bump()
	f.gone = true
	for _, w := range f.watchers {
		w.Delete(f.session.DeepCopy())
	}
}

// createAgain creates a Session of the same name, with status st (as its
// controller would write it), and sends it to open watches as ADDED.
func (f *fakeSession) createAgain(uid types.UID, st lullv1.SessionStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bump()
	f.gone = false
	f.session = &lullv1.Session{
		ObjectMeta: metav1.ObjectMeta{Name: f.session.Name, Namespace: f.session.Namespace, UID: uid, ResourceVersion: strconv.Itoa(f.rv)},
		Status:     st,
	}
	for _, w := range f.watchers {
		w.Add(f.session.DeepCopy())
	}
}

// requestDrain writes an Update drain request for pod into status.drain.
func (f *fakeSession) requestDrain(id string, pod types.UID) {
	f.requestDrainFor(id, pod, lullv1.DrainReasonUpdate)
}

// requestDrainFor writes a drain request for pod with reason into
// status.drain.
func (f *fakeSession) requestDrainFor(id string, pod types.UID, reason lullv1.DrainReason) {
	f.update(func(s *lullv1.SessionStatus) {
		s.Drain = &lullv1.DrainRequest{RequestID: id, PodUID: pod, Reason: reason, RequestedAt: metav1.NewTime(f.clock.Now())}
	})
}

func (f *fakeSession) withdraw() { f.update(func(s *lullv1.SessionStatus) { s.Drain = nil }) }

// lastReport returns the report last landed, or nil.
func (f *fakeSession) lastReport() *lullv1.RuntimeReport {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reports) == 0 {
		return nil
	}
	return f.reports[len(f.reports)-1].DeepCopy()
}

func (f *fakeSession) reportCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reports)
}

// startRuntime runs a runtime for testPod against f until the test ends.
func startRuntime(t *testing.T, f *fakeSession) *Runtime {
	t.Helper()
	rt := newTestRuntime(f)
	runRuntime(t, rt)
	return rt
}

// newTestRuntime returns a runtime for testPod against f, on f's clock, not
// yet running.
func newTestRuntime(f *fakeSession) *Runtime {
	rt := newRuntime(testConfig(f), f)
	rt.reporter.retry = backoff{initial: time.Millisecond, max: 5 * time.Millisecond}
	return rt
}

// testConfig is the Config of a runtime for testPod against f, on f's
// clock, logging nowhere.
func testConfig(f *fakeSession) Config {
	return Config{SessionName: "s1", SessionNamespace: "ns", PodName: "s1-0", PodUID: testPod,
		Logger: slog.New(slog.DiscardHandler), Clock: f.clock}
}

// runRuntime runs rt until the test ends.
func runRuntime(t *testing.T, rt *Runtime) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Run did not return after its context was cancelled")
		}
	})
}

// settled waits until every other goroutine of the test's synctest bubble
// is blocked, so that the runtime has done all it can before its clock
// moves, and fails the test unless cond then holds.
func settled(t *testing.T, what string, cond func() bool) {
	t.Helper()
	synctest.Wait()
	if !cond() {
		t.Fatalf("%s: not so once the runtime had settled", what)
	}
}

// wantReport waits as settled does and returns the report last landed,
// failing the test unless there is one and it satisfies ok.
func wantReport(t *testing.T, f *fakeSession, what string, ok func(*lullv1.RuntimeReport) bool) *lullv1.RuntimeReport {
	t.Helper()
	synctest.Wait()
	r := f.lastReport()
	if r == nil || !ok(r) {
		t.Fatalf("%s: the last report is %s once the runtime had settled", what, describeReport(r))
	}
	return r
}

// awaitGate waits until a snapshot of rt's gate satisfies ok and returns
// it; it fails the test if none does within ten seconds. It is for the
// tests that run outside a synctest bubble (the stress tests: their
// clients never block, so a bubble never settles), and must be called
// from the test's goroutine.
func awaitGate(t *testing.T, rt *Runtime, what string, ok func(Snapshot) bool) Snapshot {
	t.Helper()
	snapshots, cancel := rt.Subscribe()
	defer cancel()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case s := <-snapshots:
			if ok(s) {
				return s
			}
		case <-timeout:
			t.Fatalf("%s: not so within 10 s; the gate is %+v", what, rt.Snapshot())
		}
	}
}

// anyReport accepts every report.
func anyReport(*lullv1.RuntimeReport) bool { return true }

func isState(s lullv1.RuntimeState, id string) func(*lullv1.RuntimeReport) bool {
	return func(r *lullv1.RuntimeReport) bool { return r.State == s && r.RequestID == id }
}

var errInjected = errors.New("injected failure")
