package requestmetrics

import (
	"errors"
	"net/http"
	"testing"
)

type answer func(*http.Request) (*http.Response, error)

func (f answer) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestTallyCountsByVerbAndResourceWatchesApart(t *testing.T) {
	tally := NewTally()
	ok := tally.Wrap(answer(func(*http.Request) (*http.Response, error) { return &http.Response{StatusCode: 200}, nil }))
	failing := tally.Wrap(answer(func(*http.Request) (*http.Response, error) { return nil, errors.New("refused") }))
	do := func(rt http.RoundTripper, method, url string) {
		req, err := http.NewRequest(method, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = rt.RoundTrip(req)
	}
	do(ok, "GET", "https://api/apis/lull.dev/v1alpha1/namespaces/ns/sessions?fieldSelector=metadata.name%3Ds&watch=true")
	do(ok, "GET", "https://api/apis/lull.dev/v1alpha1/namespaces/ns/sessions/s")
	do(ok, "PATCH", "https://api/apis/lull.dev/v1alpha1/namespaces/ns/sessions/s/status")
	do(failing, "PATCH", "https://api/apis/lull.dev/v1alpha1/namespaces/ns/sessions/s/status")

	got := tally.Counts()
	want := map[string]int64{"WATCH sessions": 1, "GET sessions": 1, "PATCH sessions/status": 2}
	if len(got) != len(want) {
		t.Fatalf("counts %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	got["GET sessions"] = 100
	if tally.Counts()["GET sessions"] != 1 {
		t.Error("Counts returned the tally's own map, not a copy")
	}
}
