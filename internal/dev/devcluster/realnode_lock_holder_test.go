package devcluster

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A second real node is refused naming the holder, and a stale record
// (its pid dead or reused by an unrelated process) never blocks nor is
// named as the holder. CheckRealNodeFree takes the lock for a moment to
// test it (another lull dev checking before it builds its images); a
// start at that moment is refused, naming the record's pid and state dir,
// which are the last node's, stopped long ago: "kill <pid>" then points
// at whatever process has that pid now. Here the record is a stopped
// node's and the lock is held only by such a check.
func TestARefusalNeverNamesAStoppedNodeAsTheHolder(t *testing.T) {
	old := machineLockPath
	machineLockPath = filepath.Join(t.TempDir(), "real-node.lock")
	t.Cleanup(func() { machineLockPath = old })
	stale := machineHolder{PID: "4194000", StateDir: "/tmp/lull-dev-stopped"}
	if err := os.WriteFile(machineLockPath, []byte(stale.encode()), 0o644); err != nil {
		t.Fatal(err)
	}

	// Another process's CheckRealNodeFree, between its tryLock and Close.
	check, err := os.Open(machineLockPath)
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	if held, err := tryLock(check); err != nil || held {
		t.Fatalf("tryLock: held %v, %v", held, err)
	}

	f, _, err := lockMachine("/tmp/lull-dev-new", nil)
	if err == nil {
		f.Close()
		return
	}
	if errors.Is(err, ErrRealNodeInUse) && strings.Contains(err.Error(), stale.PID) {
		t.Errorf("refused while no real node runs, naming a stopped node's pid as the one to kill: %v", err)
	}
}
