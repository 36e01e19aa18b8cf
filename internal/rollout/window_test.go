package rollout

import (
	"testing"
	"time"
)

func TestExpectedCompletion(t *testing.T) {
	at := func(d time.Duration) *time.Time { v := now.Add(d); return &v }
	for _, tc := range []struct {
		name        string
		stale, room int
		mean        time.Duration
		previous    *time.Time
		want        time.Time
	}{
		{"one wave", 3, 5, 20 * time.Second, nil, now.Add(20 * time.Second)},
		{"waves rounded up", 11, 5, 20 * time.Second, nil, now.Add(60 * time.Second)},
		{"a close previous estimate is kept", 11, 5, 20 * time.Second, at(62 * time.Second), now.Add(62 * time.Second)},
		{"a far previous estimate is replaced", 11, 5, 20 * time.Second, at(90 * time.Second), now.Add(60 * time.Second)},
		{"a past estimate is replaced", 1, 5, 20 * time.Second, at(-time.Second), now.Add(20 * time.Second)},
	} {
		if got := ExpectedCompletion(tc.stale, tc.room, tc.mean, now, tc.previous); !got.Equal(tc.want) {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
