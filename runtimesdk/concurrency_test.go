package runtimesdk

import (
	"errors"
	"math/rand/v2"
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
		time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
		if rand.IntN(10) == 0 {
			return errInjected, rand.IntN(2) == 0
		}
		return nil, false
	}
	rt := startRuntime(t, f)
	rt.reporter.drainingInterval = 2 * time.Millisecond

	stop := make(chan struct{})
	var wg sync.WaitGroup

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
				var opts TurnOptions
				if i%3 == 0 {
					opts.Lease = time.Duration(1+rand.IntN(5)) * time.Millisecond
				}
				turn, err := rt.BeginTurn(opts)
				if errors.Is(err, ErrDraining) {
					refused.Add(1)
					time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
					continue
				}
				if err != nil {
					violate("BeginTurn: " + err.Error())
					return
				}
				begun.Add(1)
				if opts.Lease > 0 && rand.IntN(4) == 0 {
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
				time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
				active.Add(-1)
				turn.End()
			}
		})
	}

	// The controller: requests for this pod and for another, withdrawals.
	ids := []string{req1, req2, "idle-00112233445566ff"}
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			switch rand.IntN(4) {
			case 0, 1:
				f.requestDrain(ids[rand.IntN(len(ids))], testPod)
			case 2:
				f.requestDrain(req1, otherPod)
			case 3:
				f.withdraw()
			}
			time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
		}
	})

	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	close(violations)
	for v := range violations {
		t.Error(v)
	}

	f.withdraw()
	waitFor(t, "the gate to reopen at the end", func() bool { return rt.Snapshot().Accepting })
	t.Logf("turns begun %d (crashed %d, expired %d), refused %d; Drained reports %d, reopenings %d",
		begun.Load(), crashed.Load(), rt.Snapshot().ExpiredTurns, refused.Load(), drainedCount.Load(), reopenCount.Load())
	if begun.Load() == 0 || refused.Load() == 0 || drainedCount.Load() == 0 || reopenCount.Load() == 0 {
		t.Error("the run did not exercise turns, refusals, drains and reopenings")
	}
}
