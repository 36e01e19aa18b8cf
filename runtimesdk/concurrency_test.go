package runtimesdk

import (
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// TestDrainInvariantUnderConcurrency runs many clients beginning and ending
// turns (some crashing and leaving their lease to expire) while drain
// requests for this pod and for others arrive and are withdrawn, against a
// runtime whose status writes are slow and sometimes fail (some of those
// having landed anyway). It checks, as the API server sees it:
//
//   - no Drained report lands while a turn is active;
//   - once a Drained report has landed, no turn begins until a Serving
//     report has landed;
//
// and in every snapshot: turns never negative, Drained only with 0 turns,
// turns accepted only while Serving.
//
// The runtime's clock ticks on its own (see tick).
func TestDrainInvariantUnderConcurrency(t *testing.T) {
	f := newFakeSession()
	var (
		active                                             atomic.Int64 // turns begun and not yet ended, as the clients count them
		drainedLanded                                      atomic.Bool  // the last report on the server is Drained
		violations                                         = make(chan string, 100)
		drainedCount, reopenCount, begun, refused, crashed atomic.Int64
	)
	violate := func(msg string) {
		select {
		case violations <- msg:
		default:
		}
	}
	f.onReport = func(r *lullv1.RuntimeReport) {
		if r.State == lullv1.RuntimeDrained {
			if n := active.Load(); n != 0 {
				violate("Drained landed with client turns active")
			}
			drainedCount.Add(1)
		}
		if r.State == lullv1.RuntimeServing && drainedLanded.Load() {
			reopenCount.Add(1)
		}
		drainedLanded.Store(r.State == lullv1.RuntimeDrained)
	}
	f.patchErr = func(*lullv1.RuntimeReport) (error, bool) {
		runtime.Gosched() // a slow write: others run meanwhile
		if rand.IntN(10) == 0 {
			return errInjected, rand.IntN(2) == 0
		}
		return nil, false
	}
	rt := newTestRuntime(f)
	rt.reporter.drainingInterval = 2 * time.Millisecond
	runRuntime(t, rt)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	tick(t, f.clock)

	// Snapshot checker.
	snaps, cancel := rt.Subscribe()
	defer cancel()
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case s := <-snaps:
				switch {
				case s.ActiveTurns < 0:
					violate("negative active turns")
				case s.State == lullv1.RuntimeDrained && s.ActiveTurns != 0:
					violate("Drained with active turns")
				case s.Accepting && s.State != lullv1.RuntimeServing:
					violate("accepting turns while " + string(s.State))
				}
			}
		}
	})

	// Clients.
	for i := range 24 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				// A third of the clients hold leases, and a quarter of their
				// turns crash, leaving a lease of a few milliseconds to
				// expire. A client that lives holds one it would renew in
				// time: an hour, which the ticking clock does not reach while
				// it works, so that its turn is active until it ends.
				var opts TurnOptions
				crash := false
				if i%3 == 0 {
					opts.Lease = time.Hour
					if crash = rand.IntN(4) == 0; crash {
						opts.Lease = time.Duration(1+rand.IntN(5)) * time.Millisecond
					}
				}
				turn, err := rt.BeginTurn(opts)
				if errors.Is(err, ErrDraining) {
					refused.Add(1)
					runtime.Gosched()
					continue
				}
				if err != nil {
					violate("BeginTurn: " + err.Error())
					return
				}
				begun.Add(1)
				if crash {
					crashed.Add(1) // never ends: the lease must release it
					if drainedLanded.Load() {
						violate("a turn began while a Drained report stood")
					}
					continue
				}
				active.Add(1)
				if drainedLanded.Load() {
					violate("a turn began while a Drained report stood")
				}
				for range rand.IntN(4) { // the turn's work
					runtime.Gosched()
				}
				active.Add(-1)
				turn.End()
			}
		})
	}

	// The controller: requests for this pod and for another, withdrawals,
	// each applied by the runtime before the next. It goes on until the
	// run has seen 40 Drained reports and 20 reopenings, or 20,000
	// changes.
	ids := []string{req1, req2, "idle-00112233445566ff"}
	for i := 0; i < 20000 && (drainedCount.Load() < 40 || reopenCount.Load() < 20); i++ {
		want := ""
		switch rand.IntN(4) {
		case 0, 1:
			want = ids[rand.IntN(len(ids))]
			f.requestDrain(want, testPod)
		case 2:
			f.requestDrain(req1, otherPod) // for this runtime, a withdrawal
		case 3:
			f.withdraw()
		}
		awaitGate(t, rt, "the runtime applies the controller's change", func(s Snapshot) bool { return s.RequestID == want })
		for range rand.IntN(8) {
			runtime.Gosched()
		}
	}
	close(stop)
	wg.Wait()
	close(violations)
	for v := range violations {
		t.Error(v)
	}

	f.withdraw()
	awaitGate(t, rt, "the gate reopens at the end", func(s Snapshot) bool { return s.Accepting })
	t.Logf("turns begun %d (crashed %d, expired %d), refused %d; Drained reports %d, reopenings %d",
		begun.Load(), crashed.Load(), rt.Snapshot().ExpiredTurns, refused.Load(), drainedCount.Load(), reopenCount.Load())
	if begun.Load() == 0 || refused.Load() == 0 || drainedCount.Load() == 0 || reopenCount.Load() == 0 {
		t.Error("the run did not exercise turns, refusals, drains and reopenings")
	}
}
