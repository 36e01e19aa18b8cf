package runtimesdk

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
)

// The runtime of a new pod starts while its Session still names the pod it
// replaced (the controller writes the new pod into status only once it has
// seen it, later if the controller is down or behind). That runtime was
// never replaced: it reports, and its activity too, or the controller
// would find the current pod with no report of its own (Active=Unknown,
// RuntimeNotReporting). Only a runtime the session moved away from (it
// named this pod, and now names another) writes nothing more.
func TestNewPodReportsBeforeTheSessionNamesIt(t *testing.T) {
	f := newFakeSession()
	// The session still names the previous pod, whose last report stands.
	f.session.Status.PodUID = otherPod
	prev := metav1.NewTime(time.Now().Add(-time.Minute))
	f.session.Status.Runtime = &lullv1.RuntimeReport{PodUID: otherPod, State: lullv1.RuntimeDrained, RequestID: req1, RefreshSeconds: 60, ReportedAt: &prev}
	rt := shortRefreshRuntime(f)
	runRuntime(t, rt)
	waitReport(t, f, "the new pod's Serving report", func(r *lullv1.RuntimeReport) bool {
		return r.PodUID == testPod && isState(lullv1.RuntimeServing, "")(r)
	})
	rt.Bump()
	waitReport(t, f, "the new pod's activity", func(r *lullv1.RuntimeReport) bool { return r.PodUID == testPod && r.LastActivity != nil })
}

// Guarantees of the seal around an idle cull, under concurrency: clients
// keep attempting turns while the controller issues Idle drain requests,
// withdraws them (the attempts are activity) or, when it finds the runtime
// Drained for the current request, commits the replacement (a
// compare-and-swap: it lands only on the version that shows the answer).
// Once the commitment has landed no turn is ever accepted, the gate never
// reopens, and once the runtime has applied it (held), a refused attempt
// never moves lastActivity.
func TestNoTurnAfterACommittedIdleCullUnderConcurrency(t *testing.T) {
	commits := 0
	defer func() {
		if commits == 0 {
			t.Error("no round reached a commitment")
		}
		t.Logf("%d of 20 rounds committed", commits)
	}()
	for round := range 20 {
		f := newFakeSession()
		rt := startRuntime(t, f)
		rt.reporter.drainingInterval = time.Millisecond
		waitFor(t, "the gate to open", func() bool { return rt.Snapshot().Accepting })

		var committed atomic.Bool
		var acceptedAfterCommit atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					wasCommitted := committed.Load()
					turn, err := rt.BeginTurn(TurnOptions{})
					if err == nil {
						if wasCommitted {
							acceptedAfterCommit.Add(1)
						}
						time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
						turn.End()
						continue
					}
					time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
				}
			})
		}
		// The controller.
		seq := int64(0)
		deadline := time.Now().Add(2 * time.Second)
		for !committed.Load() && time.Now().Before(deadline) {
			f.mu.Lock()
			st := &f.session.Status
			switch r := st.Runtime; {
			case st.Drain == nil:
				seq++
				st.Drain = &lullv1.DrainRequest{RequestID: drain.RequestID(testPod, lullv1.DrainReasonIdle, seq), PodUID: testPod, Reason: lullv1.DrainReasonIdle, Sequence: seq}
				f.bumpAndSend()
			case r != nil && r.State == lullv1.RuntimeDrained && r.RequestID == st.Drain.RequestID && rand.IntN(3) == 0:
				st.Replacement = &lullv1.Replacement{PodUID: testPod, Reason: lullv1.ReplacementDrained, RequestID: st.Drain.RequestID}
				committed.Store(true)
				f.bumpAndSend()
			case r != nil && r.LastActivity != nil && rand.IntN(2) == 0:
				st.Drain = nil // woken
				f.bumpAndSend()
			}
			f.mu.Unlock()
			time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
		}
		if !committed.Load() {
			close(stop)
			wg.Wait()
			continue
		}
		commits++
		waitFor(t, "the runtime to apply the commitment", func() bool { return rt.Snapshot().Replacing })
		held := rt.Snapshot()
		time.Sleep(50 * time.Millisecond)
		close(stop)
		wg.Wait()
		after := rt.Snapshot()
		if n := acceptedAfterCommit.Load(); n != 0 {
			t.Fatalf("round %d: %d turns accepted after the idle cull's replacement was committed", round, n)
		}
		if after.Accepting || !after.LastActivity.Equal(held.LastActivity) {
			t.Fatalf("round %d: after the runtime applied the commitment: accepting %v, lastActivity %v (was %v)", round, after.Accepting, after.LastActivity, held.LastActivity)
		}
	}
}

// bumpAndSend makes a new version of the session and sends it to the open
// watches, as update does. f.mu is held.
func (f *fakeSession) bumpAndSend() {
	f.bump()
	for _, w := range f.watchers {
		w.Modify(f.session.DeepCopy())
	}
}
