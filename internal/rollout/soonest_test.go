package rollout

import (
	"testing"
	"time"
)

// The soonest wait that asks for a look-again wins; a zero asks for none.
func TestSoonestIsTheShortestNonZeroWait(t *testing.T) {
	for _, tc := range []struct {
		waits []time.Duration
		want  time.Duration
	}{
		{waits: nil, want: 0},
		{waits: []time.Duration{0, 0}, want: 0},
		{waits: []time.Duration{0, 5 * time.Second}, want: 5 * time.Second},
		{waits: []time.Duration{5 * time.Second, 0}, want: 5 * time.Second},
		{waits: []time.Duration{30 * time.Second, 5 * time.Second, time.Minute}, want: 5 * time.Second},
		{waits: []time.Duration{time.Minute, -time.Second, 0}, want: -time.Second},
	} {
		if got := Soonest(tc.waits...); got != tc.want {
			t.Errorf("Soonest(%v) = %v, want %v", tc.waits, got, tc.want)
		}
	}
}
