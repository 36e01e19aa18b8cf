package agent

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"lull.dev/lull/runtimesdk"
)

// A turn whose lease expired (grace included) is over: the runtime counted
// it in expiredTurns and reported it, and the controller counted it in
// lull_runtime_expired_turns_total. But an expiry writes nothing to the
// state file, so an agent restarted in the pod restores that turn as
// active (lapsed, with a new grace of one lease): the next report shows it
// in activeTurns again, a drain waits for it once more, and when its new
// grace ends it expires a second time and is counted again.
//
//  1. A client begins a turn with a lease and crashes; the lease and its
//     grace run out; the turn expires (expiredTurns 1).
//  2. The agent's container restarts before any other turn is begun,
//     ended or renewed.
//  3. The restored gate holds the dead turn as active.
func TestExpiredTurnDoesNotComeBackAfterAnAgentRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent-turns.json")
	g := servingGate()
	s, err := Open(g, path, testPod, quiet)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	if code, _, b := call(t, srv.Client(), "POST", srv.URL+"/v1/turns", `{"lease":"30ms"}`); code != http.StatusCreated {
		t.Fatalf("POST /v1/turns = %d %s", code, b)
	}
	deadline := time.Now().Add(2 * time.Second)
	for g.Snapshot().ExpiredTurns != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the crashed client's turn never expired: %+v", g.Snapshot())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if s := g.Snapshot(); s.ActiveTurns != 0 {
		t.Fatalf("before the restart: %+v, want no active turn", s)
	}
	// The expiry reaches the state file a moment after the gate counts it.
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"id"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the expired turn is still in the state file: %s", b)
		}
		time.Sleep(5 * time.Millisecond)
	}
	srv.Close()

	restarted := runtimesdk.NewGate()
	if _, err := Open(restarted, path, testPod, quiet); err != nil {
		t.Fatal(err)
	}
	if s := restarted.Snapshot(); s.ActiveTurns != 0 {
		t.Fatalf("after an agent restart: %d active turns (%d lapsed): the turn already expired and reported as such is "+
			"active again, holds the next drain for another lease and will be counted as expired a second time",
			s.ActiveTurns, s.LapsedTurns)
	}
}
