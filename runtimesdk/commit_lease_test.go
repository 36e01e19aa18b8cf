package runtimesdk

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// A replacement committed for a pod whose runtime had not reported
// (NeverStarted) or had failed (PodFailed) is not sealed by any drain
// request: the runtime never looks at status.replacement. The controller
// deletes the pod right after the commit, with only the pod's UID and
// resourceVersion as preconditions.
//
//  1. The runtime's pod is stale and its runtime container has not yet
//     shown as started; no report names the pod.
//  2. The controller commits status.replacement = {this pod, NeverStarted}
//     and is about to delete the pod (or a paused old leader is).
//  3. The runtime starts, reads its Session (which names its pod as
//     committed for replacement), publishes Serving and opens its gate.
//  4. A client's turn is accepted; the delete lands (the kubelet has not
//     yet written the container's Running state, so the pod's
//     resourceVersion still matches): a turn is lost without any Drained
//     report.
//
// A runtime whose pod is committed for replacement must not accept turns.
func TestRuntimeRefusesTurnsWhileItsPodIsCommittedForReplacement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSession()
		f.session.Status.Replacement = &lullv1.Replacement{PodUID: testPod, Reason: lullv1.ReplacementNeverStarted, CommittedAt: metav1.NewTime(f.clock.Now())}
		rt := startRuntime(t, f)
		wantReport(t, f, "the first report, published", anyReport)
		if _, err := rt.BeginTurn(TurnOptions{}); !errors.Is(err, ErrDraining) {
			t.Fatalf("BeginTurn while status.replacement names this pod = %v, want ErrDraining: the controller is deleting the pod", err)
		}
	})
}

// "A lease that runs out is not a finished turn: its client may be stalled
// (a GC pause, CPU throttling), not gone", so during a drain a lapsed lease
// keeps the drain open for one more lease. But a lease that runs out just
// before the drain request arrives ends its turn at once, and the request
// that follows a moment later finds no turn: the gate reports Drained and
// the pod is deleted under the stalled client's work, which a Renew a
// moment later would have revived had the request come a moment earlier.
//
//  1. A client holds a turn with a lease L and stalls just past its
//     deadline (no drain yet): the turn expires at once.
//  2. A drain request arrives within L of that deadline.
//  3. The gate goes straight to Drained (the controller deletes the pod);
//     the client's Renew, still inside deadline+L, is refused.
//
// The stall tolerated must not depend on whether the request came a moment
// before or a moment after the deadline.
func TestLeaseLapsedJustBeforeADrainStillGetsItsGrace(t *testing.T) {
	g := openGate(t, newFakeClock())
	turn, err := g.BeginTurn(TurnOptions{Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	lapse(g, turn) // the client stalled 1ms past its deadline; the drain is not yet requested
	turn.checkLease()
	g.SetRequest(req1, lullv1.DrainReasonUpdate) // the request, a moment later
	if s := g.Snapshot(); s.State == lullv1.RuntimeDrained {
		t.Errorf("drain state %+v: Drained 1ms after a lease deadline, while the same stall during the drain would hold it for one more lease", s)
	}
	if _, err := turn.Renew(); err != nil {
		t.Errorf("Renew 1ms past the deadline with a drain outstanding = %v; during a drain it would revive the turn", err)
	}
}

// The Serving report that would open the gate carries, as a precondition,
// the Session version the runtime last applied. The controller commits to
// replacing a pod whose runtime has not reported with its own precondition
// on the Session, so of the commit and the opening report only the first
// lands: a runtime can no longer open on a view the controller has already
// acted on. Here the commit lands between the runtime's read and its first
// report, and the runtime's watch has not delivered it yet.
func TestOpeningReportIsConditionalOnTheSessionItSaw(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSession()
		committed := false
		f.beforePatch = func() {
			if committed {
				return
			}
			committed = true
			// The controller's commit, not yet delivered to the watch.
			f.session.Status.Replacement = &lullv1.Replacement{PodUID: testPod, Reason: lullv1.ReplacementNeverStarted, CommittedAt: metav1.NewTime(f.clock.Now())}
			f.bump()
		}
		rt := startRuntime(t, f)
		settled(t, "the opening report is refused", func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return len(f.preconditions) > 0
		})
		if s := rt.Snapshot(); s.Accepting {
			t.Fatalf("gate open after its opening report met a conflict: %+v", s)
		}
		f.mu.Lock()
		if f.preconditions[0] != "1" {
			t.Errorf("opening report precondition = %q, want the version read (1)", f.preconditions[0])
		}
		f.mu.Unlock()
		// The watch delivers the commit: the runtime holds, and never opens,
		// however often the report is retried.
		f.update(func(*lullv1.SessionStatus) {})
		settled(t, "the runtime sees the commitment", func() bool { return rt.Snapshot().Replacing })
		for range 10 {
			advance(f.clock, 10*time.Millisecond)
		}
		if _, err := rt.BeginTurn(TurnOptions{}); !errors.Is(err, ErrDraining) {
			t.Fatalf("BeginTurn on a pod committed for replacement = %v, want ErrDraining", err)
		}
	})
}
