package runtime

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff is an exponential backoff with jitter for retrying API calls: the
// n-th consecutive failure waits about min(initial·2ⁿ, max), ±20%.
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
	jitter := time.Duration((rand.Float64()*0.4 - 0.2) * float64(d))
	return d + jitter
}

// reset starts the next failure from initial again.
func (b *backoff) reset() { b.next = 0 }

// sleep waits d or until ctx is done, and reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
