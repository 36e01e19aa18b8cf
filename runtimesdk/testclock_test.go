package runtimesdk

import (
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// epoch is where the fake clocks of these tests start: a whole second, as
// reports keep time to the second.
var epoch = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

// newFakeClock returns a clock standing at epoch until the test moves it.
func newFakeClock() *clocktesting.FakeClock { return clocktesting.NewFakeClock(epoch) }

// advance moves clk on by d inside a synctest bubble. It first waits
// until every other goroutine of the bubble is blocked, so that each has
// armed the timers it is going to, and then again, so that what the
// timers that came due set off (a lease's check, the reporter's coalesced
// write, a backoff's next attempt) has run.
func advance(clk *clocktesting.FakeClock, d time.Duration) {
	synctest.Wait()
	clk.Step(d)
	synctest.Wait()
}

// tick moves clk on a tenth of a millisecond at a time, in a goroutine of
// its own, until stop is called or the test ends: the time of a stress
// test, which runs outside a synctest bubble (its clients never block, so
// a bubble never settles), so that leases run out, coalesced reports come
// due and failed writes are retried while everything else goes on.
func tick(t *testing.T, clk *clocktesting.FakeClock) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			clk.Step(100 * time.Microsecond)
			runtime.Gosched()
		}
	})
	stop = sync.OnceFunc(func() { close(done); wg.Wait() })
	t.Cleanup(stop)
	return stop
}
