package runtimesdk

import (
	"context"
	"math/rand/v2"
	"time"

	"k8s.io/utils/clock"
)

// backoff is an exponential backoff with jitter for retrying API calls: the
// n-th consecutive failure waits min(initial·2ⁿ, max), ±50%. The wide
// jitter matters when many runtimes fail together (the API server
// restarted): their retries spread out instead of arriving as one burst.
type backoff struct {
	initial, max time.Duration
	next         time.Duration
}

// step returns how long to wait before the next attempt.
func (b *backoff) step() time.Duration {
	if b.next == 0 {
		b.next = b.initial
	}
	d := b.next
	b.next = min(2*b.next, b.max)
	jitter := time.Duration((rand.Float64() - 0.5) * float64(d))
	return d + jitter
}

// spread returns a random duration in [0, d): the pause before a step every
// runtime of a fleet may take at the same moment (a watch the API server
// closed for all of them when it stopped).
func spread(d time.Duration) time.Duration { return rand.N(d) }

// reset starts the next failure from initial again.
func (b *backoff) reset() { b.next = 0 }

// sleep waits d on clk or until ctx is done, and reports whether ctx is
// still live. A d of zero or less does not wait: a fake clock's timer of
// zero fires only once the clock is moved.
func sleep(ctx context.Context, clk clock.Clock, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
