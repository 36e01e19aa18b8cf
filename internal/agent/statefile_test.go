package agent

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/runtimesdk"
)

// readState reads and decodes the state file at path.
func readState(t *testing.T, path string) []runtimesdk.TurnRecord {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pod, records, err := decodeState(b)
	if err != nil || pod != testPod {
		t.Fatalf("state file %s: pod %q, %v; want pod %s", b, pod, err, testPod)
	}
	return records
}

func TestStateFileHoldsEveryAcknowledgedTurn(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent-turns.json")
	s, err := Open(servingGate(), path, testPod, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if got := readState(t, path); len(got) != 0 {
		t.Fatalf("state file after the first start holds %+v, want no turns", got)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := srv.Client()

	// Each check reads the file just after the answer: it was written before.
	code, _, b := call(t, c, "POST", srv.URL+"/v1/turns", `{"lease":"1m"}`)
	if code != http.StatusCreated {
		t.Fatalf("POST = %d %s", code, b)
	}
	leased := decode[turnResponse](t, b)
	if got := readState(t, path); len(got) != 1 || got[0].ID != leased.ID || got[0].Lease != time.Minute ||
		!got[0].LeaseDeadline.Equal(leased.LeaseExpiresAt) || time.Since(got[0].Begun) > time.Minute {
		t.Fatalf("state file after begin: %+v, want %s with its lease and deadline %v", got, leased.ID, leased.LeaseExpiresAt)
	}
	time.Sleep(5 * time.Millisecond)
	code, _, b = call(t, c, "POST", srv.URL+"/v1/turns/"+leased.ID+"/renew", "")
	renewed := decode[turnResponse](t, b)
	if got := readState(t, path); code != http.StatusOK || len(got) != 1 || !got[0].LeaseDeadline.Equal(renewed.LeaseExpiresAt) {
		t.Fatalf("state file after renew (%d): %+v, want the new deadline %v", code, got, renewed.LeaseExpiresAt)
	}
	_, _, b = call(t, c, "POST", srv.URL+"/v1/turns", "")
	plain := decode[turnResponse](t, b)
	if got := readState(t, path); len(got) != 2 || got[0].ID != leased.ID || got[1].ID != plain.ID || got[1].Lease != 0 {
		t.Fatalf("state file after a second begin: %+v, want %s then %s without lease", got, leased.ID, plain.ID)
	}
	call(t, c, "DELETE", srv.URL+"/v1/turns/"+leased.ID, "")
	if got := readState(t, path); len(got) != 1 || got[0].ID != plain.ID {
		t.Fatalf("state file after end: %+v, want only %s", got, plain.ID)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Errorf("directory holds %v (%v), want only the state file", entries, err)
	}
}

func TestBeginIsRefusedWhenTheTurnCannotBeRecorded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "lull")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	g := servingGate()
	s, err := Open(g, filepath.Join(dir, "agent-turns.json"), testPod, quiet)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	if err := os.RemoveAll(dir); err != nil { // the volume is gone
		t.Fatal(err)
	}
	code, _, b := call(t, srv.Client(), "POST", srv.URL+"/v1/turns", "")
	if e := decode[errorResponse](t, b); code != http.StatusInternalServerError || e.Error != "state_file" {
		t.Errorf("POST with an unwritable state file = %d %s, want 500 state_file", code, b)
	}
	if s := g.Snapshot(); s.ActiveTurns != 0 {
		t.Errorf("a turn that could not be recorded is active: %+v", s)
	}
}

func TestOpenFailsClosedOnAStateFileItCannotUse(t *testing.T) {
	for name, content := range map[string]string{
		"empty":            "",
		"not JSON":         "{\"version\":1,\"podUID\":\"pod-uid-1\",\"turns\":[",
		"other version":    `{"version":2,"podUID":"pod-uid-1","turns":[]}`,
		"no pod":           `{"version":1,"turns":[]}`,
		"unknown field":    `{"version":1,"podUID":"pod-uid-1","turns":[],"sealed":true}`,
		"two documents":    `{"version":1,"podUID":"pod-uid-1","turns":[]} {}`,
		"bad lease":        `{"version":1,"podUID":"pod-uid-1","turns":[{"id":"t-0123456789abcdef","lease":"soon","begun":"2025-01-01T00:00:00Z"}]}`,
		"turn refused":     `{"version":1,"podUID":"pod-uid-1","turns":[{"id":"t-1","begun":"2025-01-01T00:00:00Z"}]}`,
		"unreadable (dir)": "",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "agent-turns.json")
			var err error
			if strings.HasPrefix(name, "unreadable") {
				err = os.Mkdir(path, 0o700)
			} else {
				err = os.WriteFile(path, []byte(content), 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
			g := runtimesdk.NewGate()
			_, err = Open(g, path, testPod, quiet)
			for _, want := range []string{path, "does not start", "remove the file", lullv1.AnnotationForceUpdate} {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("Open = %v, want an error containing %q", err, want)
				}
			}
			if b, rerr := os.ReadFile(path); rerr == nil && string(b) != content {
				t.Errorf("Open rewrote the state file it refused: %s", b)
			}
			if g.Snapshot().ActiveTurns != 0 {
				t.Error("a refused state file restored turns")
			}
		})
	}
}

func TestOpenStartsEmptyWithoutAStateFileOrWithAnotherPods(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent-turns.json")
	leftover := filepath.Join(dir, ".agent-turns.json.tmp-123")
	if err := os.WriteFile(leftover, []byte("half a write"), 0o600); err != nil {
		t.Fatal(err)
	}
	g := runtimesdk.NewGate()
	if _, err := Open(g, path, testPod, quiet); err != nil {
		t.Fatalf("Open without a state file: %v", err)
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Errorf("a temporary file of an earlier agent is left: %v", err)
	}
	if got := readState(t, path); len(got) != 0 || g.Snapshot().ActiveTurns != 0 {
		t.Errorf("first start: state file %+v, gate %+v; want no turns", got, g.Snapshot())
	}

	other := encodeState("pod-uid-0", []runtimesdk.TurnRecord{{ID: "t-0123456789abcdef", Begun: time.Now()}})
	if err := os.WriteFile(path, other, 0o600); err != nil {
		t.Fatal(err)
	}
	g = runtimesdk.NewGate()
	if _, err := Open(g, path, testPod, quiet); err != nil {
		t.Fatalf("Open with another pod's state file: %v", err)
	}
	if got := readState(t, path); len(got) != 0 || g.Snapshot().ActiveTurns != 0 {
		t.Errorf("another pod's state file: now %+v, gate %+v; want its turns dropped", got, g.Snapshot())
	}
}

func TestOpenNeedsTheStateDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no-volume", "agent-turns.json")
	if _, err := Open(runtimesdk.NewGate(), path, testPod, quiet); err == nil || !strings.Contains(err.Error(), "mount an emptyDir") {
		t.Errorf("Open in a missing directory = %v, want an error telling to mount an emptyDir", err)
	}
	if _, err := Open(runtimesdk.NewGate(), "", testPod, quiet); err == nil {
		t.Error("Open with no state file succeeded")
	}
}
