package runtimesdk

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
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
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSession()
		// The session still names the previous pod, whose last report stands.
		f.session.Status.PodUID = otherPod
		prev := metav1.NewTime(f.clock.Now().Add(-time.Minute))
		f.session.Status.Runtime = &lullv1.RuntimeReport{PodUID: otherPod, State: lullv1.RuntimeDrained, RequestID: req1, RefreshSeconds: 60, ReportedAt: &prev}
		rt := shortRefreshRuntime(f)
		runRuntime(t, rt)
		wantReport(t, f, "the new pod's Serving report", func(r *lullv1.RuntimeReport) bool {
			return r.PodUID == testPod && isState(lullv1.RuntimeServing, "")(r)
		})
		rt.Bump()
		advance(f.clock, shortRefresh)
		wantReport(t, f, "the new pod's activity, a refresh later", func(r *lullv1.RuntimeReport) bool { return r.PodUID == testPod && r.LastActivity != nil })
	})
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
		reported := make(chan struct{}, 1)
		f.onReport = func(*lullv1.RuntimeReport) {
			select {
			case reported <- struct{}{}:
			default:
			}
		}
		rt := newTestRuntime(f)
		rt.reporter.drainingInterval = time.Millisecond
		runRuntime(t, rt)
		stopTicking := tick(t, f.clock)
		awaitGate(t, rt, "the gate opens", func(s Snapshot) bool { return s.Accepting })

		var committed, held atomic.Bool
		var acceptedAfterCommit atomic.Int64
		stop := make(chan struct{})
		var wg, attemptsOnceHeld sync.WaitGroup
		const clients, attemptsEachOnceHeld = 8, 50
		attemptsOnceHeld.Add(clients)
		for range clients {
			wg.Go(func() {
				onceHeld := 0
				for {
					select {
					case <-stop:
						return
					default:
					}
					wasCommitted, wasHeld := committed.Load(), held.Load()
					turn, err := rt.BeginTurn(TurnOptions{})
					if wasHeld {
						if onceHeld++; onceHeld == attemptsEachOnceHeld {
							attemptsOnceHeld.Done()
						}
					}
					if err == nil {
						if wasCommitted {
							acceptedAfterCommit.Add(1)
						}
						for range rand.IntN(4) { // the turn's work
							runtime.Gosched()
						}
						turn.End()
						continue
					}
					runtime.Gosched()
				}
			})
		}
		// The controller: a request, then, once the runtime has answered
		// it or not, a withdrawal or (if it answered Drained) the
		// commitment.
		for seq := int64(1); seq <= 50 && !committed.Load(); seq++ {
			id := drain.RequestID(testPod, lullv1.DrainReasonIdle, seq)
			f.requestDrainFor(id, testPod, lullv1.DrainReasonIdle)
			awaitGate(t, rt, "the runtime applies the request", func(s Snapshot) bool { return s.RequestID == id })
			for acted := false; !acted; {
				for range rand.IntN(64) {
					runtime.Gosched()
				}
				f.mu.Lock()
				st := &f.session.Status
				r := st.Runtime
				answered := r != nil && r.State == lullv1.RuntimeDrained && r.RequestID == id
				switch {
				case answered && rand.IntN(3) == 0:
					st.Replacement = &lullv1.Replacement{PodUID: testPod, Reason: lullv1.ReplacementDrained, RequestID: id}
					committed.Store(true)
					f.bumpAndSend()
					acted = true
				case r != nil && r.LastActivity != nil && rand.IntN(2) == 0:
					st.Drain = nil // woken
					f.bumpAndSend()
					acted = true
				}
				f.mu.Unlock()
				if !acted && !answered {
					select { // the runtime's answer (Drained comes at once once the turns have ended)
					case <-reported:
					case <-time.After(10 * time.Second):
						t.Fatalf("round %d: no report for %s within 10 s; the gate is %+v", round, id, rt.Snapshot())
					}
				}
			}
			if !committed.Load() {
				awaitGate(t, rt, "the runtime applies the withdrawal", func(s Snapshot) bool { return s.RequestID == "" })
			}
		}
		if !committed.Load() {
			close(stop)
			wg.Wait()
			stopTicking()
			continue
		}
		commits++
		before := awaitGate(t, rt, "the runtime applies the commitment", func(s Snapshot) bool { return s.Replacing })
		// Time moves on, so that an attempt recorded as activity from now
		// on would show.
		f.clock.Step(time.Second)
		held.Store(true)
		attemptsOnceHeld.Wait()
		close(stop)
		wg.Wait()
		stopTicking()
		after := rt.Snapshot()
		if n := acceptedAfterCommit.Load(); n != 0 {
			t.Fatalf("round %d: %d turns accepted after the idle cull's replacement was committed", round, n)
		}
		if after.Accepting || !after.LastActivity.Equal(before.LastActivity) {
			t.Fatalf("round %d: after the runtime applied the commitment: accepting %v, lastActivity %v (was %v)", round, after.Accepting, after.LastActivity, before.LastActivity)
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
