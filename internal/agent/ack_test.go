package agent

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/runtimesdk"
)

// An end whose state-file write fails is still answered 204, on the ground
// that the stale file "errs only towards holding a drain longer: a restarted
// agent treats the turn as lapsed and gives its grace". That holds for a
// leased turn only. A turn without a lease is restored active until End, and
// its client, told it had ended, never ends it again: the drain is held
// forever (there is no drain timeout), although nothing is running.
//
//  1. The runtime begins a turn without a lease; the agent records it.
//  2. The state volume fails for a moment (here: the directory is moved
//     away); the runtime ends the turn and gets 204, the file still lists
//     it.
//  3. The volume is back; the agent's container restarts and restores the
//     ended turn as active, with no lease.
//  4. A drain request arrives: the runtime reports Draining with one active
//     turn, forever. The session can only be replaced by force.
func TestAcknowledgedEndNeverHoldsADrainAfterAnAgentRestart(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "lull")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "agent-turns.json")
	s, err := Open(servingGate(), path, testPod, quiet)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	code, _, b := call(t, srv.Client(), "POST", srv.URL+"/v1/turns", "")
	if code != http.StatusCreated {
		t.Fatalf("POST /v1/turns = %d %s", code, b)
	}
	id := decode[turnResponse](t, b).ID

	aside := filepath.Join(root, "aside")
	if err := os.Rename(dir, aside); err != nil { // the volume fails for a moment
		t.Fatal(err)
	}
	code, _, b = call(t, srv.Client(), "DELETE", srv.URL+"/v1/turns/"+id, "")
	if err := os.Rename(aside, dir); err != nil {
		t.Fatal(err)
	}
	if code != http.StatusNoContent {
		// Not acknowledged: the client retries its end, now that the
		// volume is back.
		if code, _, b = call(t, srv.Client(), "DELETE", srv.URL+"/v1/turns/"+id, ""); code != http.StatusNoContent {
			t.Fatalf("retried DELETE = %d %s", code, b)
		}
	}
	srv.Close()

	// The agent's container restarts; then the controller asks for a drain.
	g := runtimesdk.NewGate()
	if _, err := Open(g, path, testPod, quiet); err != nil {
		t.Fatal(err)
	}
	g.SetRequest(req1, lullv1.DrainReasonUpdate)
	deadline := time.Now().Add(2 * time.Second)
	for g.Snapshot().State != lullv1.RuntimeDrained {
		if time.Now().After(deadline) {
			t.Fatalf("drain state %+v after the restart: the turn ended (and acknowledged) before the restart holds the drain open with no lease to end it",
				g.Snapshot())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
