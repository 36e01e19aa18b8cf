package devcluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrStateDirInUse is returned (wrapped) by Start when another cluster,
// in this process or another, holds the state directory's lock.
var ErrStateDirInUse = errors.New("state directory in use")

// stateDirInUseError names the directory and the process holding it.
type stateDirInUseError struct {
	dir, pid string
}

func (e *stateDirInUseError) Error() string {
	return fmt.Sprintf("state dir %s is in use by another lull dev (pid %s); stop it or choose another --state-dir", e.dir, e.pid)
}

func (e *stateDirInUseError) Is(target error) bool { return target == ErrStateDirInUse }

// lockStateDir takes an exclusive, non-blocking lock on <dir>/lock and
// writes this process's ID into it, so that a second cluster on the same
// directory fails instead of regenerating the CA and wiping the live etcd
// data. The lock is held until the returned file is closed (or the
// process exits); children do not inherit it (Go opens files close-on-exec).
func lockStateDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	held, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if held {
		f.Close()
		pid := "unknown"
		if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) != "" {
			pid = strings.TrimSpace(string(b))
		}
		return nil, &stateDirInUseError{dir: dir, pid: pid}
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return f, nil
}
