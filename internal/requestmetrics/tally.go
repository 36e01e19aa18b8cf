package requestmetrics

import (
	"net/http"
	"sync"
)

// Tally counts the requests sent through the round trippers it wraps, in
// memory, by "VERB resource": VERB as Verb returns it (a watch counted
// once, when the server answers it), resource as Resource returns it. It
// is for a process that wants its own requests' count without a metrics endpoint (the bench counting
// what fleet-mode runtimes send). The zero value is not usable: use
// NewTally. Safe for concurrent use.
type Tally struct {
	mu     sync.Mutex
	counts map[string]int64
}

// NewTally returns an empty tally.
func NewTally() *Tally { return &Tally{counts: map[string]int64{}} }

// Wrap returns a round tripper that counts every request in t, answered
// or not, and passes it to next.
func (t *Tally) Wrap(next http.RoundTripper) http.RoundTripper {
	return tallyRoundTripper{tally: t, next: next}
}

// Counts returns a copy of the counts so far, by "VERB resource".
func (t *Tally) Counts() map[string]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]int64, len(t.counts))
	for k, v := range t.counts {
		out[k] = v
	}
	return out
}

func (t *Tally) add(key string) {
	t.mu.Lock()
	t.counts[key]++
	t.mu.Unlock()
}

type tallyRoundTripper struct {
	tally *Tally
	next  http.RoundTripper
}

func (rt tallyRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := rt.next.RoundTrip(req)
	rt.tally.add(Verb(req) + " " + Resource(req.URL.Path))
	return resp, err
}
