package agent

import (
	"bufio"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/runtimesdk"
)

const (
	req1    = "update-0123456789abcdef"
	idleReq = "idle-0123456789abcdef"
	testPod = "pod-uid-1"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// servingGate returns a gate that accepts turns, as after its first report.
func servingGate() *runtimesdk.Gate {
	g := runtimesdk.NewGate()
	g.Published(lullv1.RuntimeServing)
	return g
}

// openServer opens a Server for g over a new state file.
func openServer(t *testing.T, g Gate) *Server {
	t.Helper()
	s, err := Open(g, filepath.Join(t.TempDir(), "agent-turns.json"), testPod, quiet)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newTestServer(t *testing.T, g Gate) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(openServer(t, g))
	t.Cleanup(srv.Close)
	return srv
}

// call sends a request and returns the status, headers and body.
func call(t *testing.T, c *http.Client, method, url, body string) (int, http.Header, []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("response %s: %v", b, err)
	}
	return v
}

func TestTurnLifecycle(t *testing.T) {
	g := servingGate()
	srv := newTestServer(t, g)
	c := srv.Client()

	code, h, b := call(t, c, "POST", srv.URL+"/v1/turns", "")
	if code != http.StatusCreated {
		t.Fatalf("POST /v1/turns = %d %s, want 201", code, b)
	}
	turn := decode[turnResponse](t, b)
	if !regexp.MustCompile(`^t-[0-9a-f]{16}$`).MatchString(turn.ID) || !turn.LeaseExpiresAt.IsZero() || h.Get("Location") != "/v1/turns/"+turn.ID {
		t.Errorf("turn %s (Location %q), want an ID, no lease and its location", b, h.Get("Location"))
	}
	if strings.Contains(string(b), "leaseExpiresAt") {
		t.Errorf("a turn without lease has leaseExpiresAt: %s", b)
	}
	if s := g.Snapshot(); s.ActiveTurns != 1 {
		t.Errorf("after POST: %d active turns, want 1", s.ActiveTurns)
	}
	if code, _, b := call(t, c, "POST", srv.URL+"/v1/turns/"+turn.ID+"/renew", ""); code != http.StatusOK {
		t.Errorf("renew a turn without lease = %d %s, want 200", code, b)
	}
	if code, _, b := call(t, c, "DELETE", srv.URL+"/v1/turns/"+turn.ID, ""); code != http.StatusNoContent || len(b) != 0 {
		t.Errorf("DELETE = %d %s, want 204", code, b)
	}
	if s := g.Snapshot(); s.ActiveTurns != 0 {
		t.Errorf("after DELETE: %d active turns, want 0", s.ActiveTurns)
	}
	for _, path := range []string{"/v1/turns/" + turn.ID, "/v1/turns/t-0000000000000000"} {
		code, _, b := call(t, c, "DELETE", srv.URL+path, "")
		if code != http.StatusNotFound || decode[errorResponse](t, b).Error != "not_found" {
			t.Errorf("DELETE %s = %d %s, want 404 not_found", path, code, b)
		}
	}
	if code, _, _ := call(t, c, "POST", srv.URL+"/v1/turns/t-0000000000000000/renew", ""); code != http.StatusNotFound {
		t.Errorf("renew an unknown turn = %d, want 404", code)
	}
	if code, _, _ := call(t, c, "GET", srv.URL+"/v1/turns", ""); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/turns = %d, want 405", code)
	}
}

func TestLeasedTurns(t *testing.T) {
	g := servingGate()
	srv := newTestServer(t, g)
	c := srv.Client()

	before := time.Now()
	code, _, b := call(t, c, "POST", srv.URL+"/v1/turns", `{"lease":"30s"}`)
	if code != http.StatusCreated {
		t.Fatalf("POST with lease = %d %s", code, b)
	}
	long := decode[turnResponse](t, b)
	if exp := long.LeaseExpiresAt; exp.Before(before.Add(30*time.Second)) || exp.After(time.Now().Add(30*time.Second)) {
		t.Errorf("leaseExpiresAt %v, want 30s from the request", exp)
	}
	time.Sleep(5 * time.Millisecond)
	code, _, b = call(t, c, "POST", srv.URL+"/v1/turns/"+long.ID+"/renew", "")
	if renewed := decode[turnResponse](t, b); code != http.StatusOK || !renewed.LeaseExpiresAt.After(long.LeaseExpiresAt) || renewed.ID != long.ID {
		t.Errorf("renew = %d %s, want 200 and a later expiry than %v", code, b, long.LeaseExpiresAt)
	}

	// A client that crashes mid-turn: its lease releases the drain.
	code, _, b = call(t, c, "POST", srv.URL+"/v1/turns", `{"lease":"20ms"}`)
	if code != http.StatusCreated {
		t.Fatalf("POST with lease = %d %s", code, b)
	}
	crashed := decode[turnResponse](t, b)
	call(t, c, "DELETE", srv.URL+"/v1/turns/"+long.ID, "")
	g.SetRequest(req1, lullv1.DrainReasonUpdate)
	deadline := time.Now().Add(5 * time.Second)
	for g.Snapshot().State != lullv1.RuntimeDrained {
		if time.Now().After(deadline) {
			t.Fatalf("the expired lease did not release the drain: %+v", g.Snapshot())
		}
		time.Sleep(time.Millisecond)
	}
	if _, _, b := call(t, c, "GET", srv.URL+"/v1/drain", ""); !strings.Contains(string(b), `"expiredTurns":1`) || !strings.Contains(string(b), `"lapsedTurns":0`) {
		t.Errorf("GET /v1/drain = %s, want the expired turn counted", b)
	}
	for _, tc := range []struct{ method, path string }{
		{"POST", "/v1/turns/" + crashed.ID + "/renew"},
		{"DELETE", "/v1/turns/" + crashed.ID},
	} {
		code, _, b := call(t, c, tc.method, srv.URL+tc.path, "")
		if code != http.StatusNotFound {
			t.Errorf("%s %s of an expired turn = %d %s, want 404", tc.method, tc.path, code, b)
		}
	}

	for _, body := range []string{`{"lease":"soon"}`, `{"lease":"-1s"}`, `{"lease":"0s"}`, `{"lease":30}`, `{"ttl":"30s"}`, `not json`} {
		code, _, b := call(t, c, "POST", srv.URL+"/v1/turns", body)
		if code != http.StatusBadRequest || decode[errorResponse](t, b).Error != "bad_request" {
			t.Errorf("POST /v1/turns %s = %d %s, want 400 bad_request", body, code, b)
		}
	}
}

func TestTurnsRefusedWhileDraining(t *testing.T) {
	for _, tc := range []struct {
		name       string
		gate       func() *runtimesdk.Gate
		state      lullv1.RuntimeState
		retryAfter string
		message    string
	}{
		{"draining", func() *runtimesdk.Gate {
			g := servingGate()
			g.BeginTurn(runtimesdk.TurnOptions{}) //nolint:errcheck
			g.SetRequest(req1, lullv1.DrainReasonUpdate)
			return g
		}, lullv1.RuntimeDraining, "5", "session is draining for an update (request " + req1 + "): retry after reconnect"},
		{"drained", func() *runtimesdk.Gate {
			g := servingGate()
			g.SetRequest(req1, lullv1.DrainReasonUpdate)
			return g
		}, lullv1.RuntimeDrained, "5", "retry after reconnect"},
		{"starting", runtimesdk.NewGate, lullv1.RuntimeServing, "1", "session runtime is starting: retry after reconnect"},
		// An Idle drain: the attempt wakes the session, which serves again
		// in this pod once the controller withdraws the request.
		{"idle", func() *runtimesdk.Gate {
			g := servingGate()
			g.SetRequest(idleReq, lullv1.DrainReasonIdle)
			return g
		}, lullv1.RuntimeDrained, "1", "session is being suspended for inactivity (request " + idleReq + "); this attempt counts as activity: retry the turn in a moment"},
		{"idle, committed for replacement", func() *runtimesdk.Gate {
			g := servingGate()
			g.SetRequest(idleReq, lullv1.DrainReasonIdle)
			g.SetHeld(true)
			return g
		}, lullv1.RuntimeDrained, "5", "retry after reconnect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newTestServer(t, tc.gate())
			code, h, b := call(t, srv.Client(), "POST", srv.URL+"/v1/turns", `{"lease":"30s"}`)
			e := decode[errorResponse](t, b)
			if code != http.StatusServiceUnavailable || e.Error != "draining" || e.State != tc.state || !strings.Contains(e.Message, tc.message) {
				t.Errorf("POST /v1/turns = %d %s, want 503 draining in state %s with %q", code, b, tc.state, tc.message)
			}
			if got := h.Get("Retry-After"); got != tc.retryAfter {
				t.Errorf("Retry-After %q, want %q", got, tc.retryAfter)
			}
		})
	}
}

func TestDrainStateActivityAndHealth(t *testing.T) {
	g := servingGate()
	srv := newTestServer(t, g)
	c := srv.Client()

	drainState := func() runtimesdk.Snapshot {
		code, h, b := call(t, c, "GET", srv.URL+"/v1/drain", "")
		if code != http.StatusOK || h.Get("Content-Type") != "application/json" {
			t.Fatalf("GET /v1/drain = %d %s %s", code, h.Get("Content-Type"), b)
		}
		return decode[runtimesdk.Snapshot](t, b)
	}
	if s := drainState(); s.State != lullv1.RuntimeServing || !s.Accepting || !s.LastActivity.IsZero() {
		t.Errorf("drain state %+v, want Serving, accepting, no activity", s)
	}
	if code, _, b := call(t, c, "GET", srv.URL+"/healthz", ""); code != http.StatusOK || string(b) != "ok\n" {
		t.Errorf("GET /healthz = %d %q", code, b)
	}
	if !g.Snapshot().LastActivity.IsZero() {
		t.Error("a health check or a state read recorded activity")
	}
	if code, _, _ := call(t, c, "POST", srv.URL+"/v1/activity", ""); code != http.StatusNoContent {
		t.Errorf("POST /v1/activity = %d, want 204", code)
	}
	s := drainState()
	if s.LastActivity.IsZero() || time.Since(s.LastActivity) > time.Minute {
		t.Errorf("after POST /v1/activity: %+v, want recent activity", s)
	}
	mark := g.Snapshot().LastActivity

	// While the session is being drained for inactivity, only a user can
	// wake it: reads of its state, streams and probes must not.
	g.SetRequest(idleReq, lullv1.DrainReasonIdle)
	time.Sleep(2 * time.Millisecond)
	if s := drainState(); s.State != lullv1.RuntimeDrained || s.RequestID != idleReq || s.Reason != lullv1.DrainReasonIdle || s.Accepting {
		t.Errorf("drain state %+v, want Drained for %s", s, idleReq)
	}
	call(t, c, "GET", srv.URL+"/healthz", "")
	if s := firstEvent(t, srv); s.RequestID != idleReq {
		t.Errorf("drain stream sent %+v, want the Idle drain", s)
	}
	if got := g.Snapshot().LastActivity; !got.Equal(mark) {
		t.Errorf("during an Idle drain, a state read, a stream or a health check recorded activity (%v, was %v)", got, mark)
	}
	attempted := time.Now()
	if code, _, b := call(t, c, "POST", srv.URL+"/v1/turns", ""); code != http.StatusServiceUnavailable {
		t.Fatalf("POST /v1/turns during an Idle drain = %d %s, want 503", code, b)
	}
	if got := drainState().LastActivity; got.Before(attempted) {
		t.Errorf("a turn attempted during an Idle drain was not recorded as activity (%v, attempted at %v)", got, attempted)
	}
	bumped := time.Now()
	if code, _, _ := call(t, c, "POST", srv.URL+"/v1/activity", ""); code != http.StatusNoContent {
		t.Errorf("POST /v1/activity = %d, want 204", code)
	}
	if got := drainState().LastActivity; got.Before(bumped) {
		t.Errorf("POST /v1/activity during an Idle drain was not recorded (%v)", got)
	}
}

// firstEvent opens the drain stream, returns its first event and closes it.
func firstEvent(t *testing.T, srv *httptest.Server) runtimesdk.Snapshot {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + "/v1/drain/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			return decode[runtimesdk.Snapshot](t, []byte(data))
		}
	}
	t.Fatalf("drain stream ended without an event: %v", sc.Err())
	return runtimesdk.Snapshot{}
}

func TestDrainStream(t *testing.T) {
	g := servingGate()
	srv := newTestServer(t, g)
	resp, err := srv.Client().Get(srv.URL + "/v1/drain/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("GET /v1/drain/stream = %d %s", resp.StatusCode, ct)
	}
	events := make(chan runtimesdk.Snapshot)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var s runtimesdk.Snapshot
			if err := json.Unmarshal([]byte(data), &s); err != nil {
				t.Errorf("event %q: %v", data, err)
				return
			}
			events <- s
		}
	}()
	next := func(what string, ok func(runtimesdk.Snapshot) bool) {
		t.Helper()
		timeout := time.After(5 * time.Second)
		for {
			select {
			case s, open := <-events:
				if !open {
					t.Fatalf("stream ended waiting for %s", what)
				}
				if ok(s) {
					return
				}
			case <-timeout:
				t.Fatalf("no event for %s", what)
			}
		}
	}
	next("the current state", func(s runtimesdk.Snapshot) bool { return s.State == lullv1.RuntimeServing && s.Accepting })
	turn, err := g.BeginTurn(runtimesdk.TurnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	next("the turn", func(s runtimesdk.Snapshot) bool { return s.ActiveTurns == 1 })
	g.SetRequest(req1, lullv1.DrainReasonUpdate)
	next("Draining", func(s runtimesdk.Snapshot) bool { return s.State == lullv1.RuntimeDraining && s.RequestID == req1 })
	turn.End()
	next("Drained", func(s runtimesdk.Snapshot) bool { return s.State == lullv1.RuntimeDrained && s.ActiveTurns == 0 })
}
