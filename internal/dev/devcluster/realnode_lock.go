package devcluster

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// machineLockPath is the machine-wide lock of the real node: the host
// paths a node writes (docs/real-node.md) are the machine's, so one real
// node runs on a machine at a time. The file stays after the node stops.
// Its record says a lull node may have left something on the machine:
// it is written once the lock is taken, stays if the node crashes (so the
// next start knows that what it finds in /var/lib/kubelet is a lull
// node's), and is cleared by a clean stop, which removed everything (so a
// /var/lib/kubelet made afterwards is another kubelet's, and refused).
var machineLockPath = "/run/lull-real-node.lock"

// ErrRealNodeInUse is returned (wrapped) by Start with RealNode when
// another process runs this machine's real node.
var ErrRealNodeInUse = errors.New("the machine's real node is in use")

// machineHolder is what the lock file records: the process that holds
// (or last held) the real node and its state directory.
type machineHolder struct {
	PID, StateDir string
}

func (h machineHolder) encode() string {
	return "pid " + h.PID + "\nstate " + h.StateDir + "\n"
}

// decodeHolder reads the lock file's record; missing fields stay empty.
func decodeHolder(s string) machineHolder {
	var h machineHolder
	for line := range strings.SplitSeq(s, "\n") {
		k, v, _ := strings.Cut(line, " ")
		switch k {
		case "pid":
			h.PID = v
		case "state":
			h.StateDir = v
		}
	}
	return h
}

// realNodeInUseError names the holder and how to stop it; with no
// holder (its PID empty) the lock is held by a process that is no node on
// record: one starting a real node or checking for one.
type realNodeInUseError struct{ holder machineHolder }

func (e *realNodeInUseError) Error() string {
	pid, dir := e.holder.PID, e.holder.StateDir
	if pid == "" {
		return fmt.Sprintf("devcluster: this machine's real node lock %s is held by a process starting a real node or checking for one (no running lull dev is on record); one real node runs per machine: start again in a moment (if it stays held, `fuser -v %s` names the holder) or start without --real-node", machineLockPath, machineLockPath)
	}
	if dir == "" {
		dir = "unknown"
	}
	return fmt.Sprintf("devcluster: this machine's real node is in use by another lull dev (pid %s, state dir %s); one real node runs per machine: stop that one (Ctrl-C in its terminal, or kill %s) or start without --real-node", pid, dir, pid)
}

func (e *realNodeInUseError) Is(target error) bool { return target == ErrRealNodeInUse }

// machineLock is the machine lock, held while its file is open.
type machineLock struct{ f *os.File }

// Close is the release of a clean stop, after everything the node wrote
// was removed: the record is cleared under the lock, then the lock
// released. A crash (the process gone, the kernel releasing the lock)
// leaves the record; so does release.
func (l *machineLock) Close() error {
	err := l.f.Truncate(0)
	return errors.Join(err, l.f.Close())
}

// release gives the lock up keeping the record: the node may have left
// something, which the next start must take for a lull node's and remove.
func (l *machineLock) release() error { return l.f.Close() }

// lockRetries and lockRetryEvery: a lock found held is tried again for
// about a second before a refusal. A CheckRealNodeFree holds it for a
// moment, and so does a start between its flock and its record write; a
// refusal then would name a stale record (a node stopped long ago) as the
// holder. A running node holds it on.
var (
	lockRetries    = 10
	lockRetryEvery = 100 * time.Millisecond
)

// tryLockPatiently is tryLock, tried again while the lock is held, at
// most lockRetries times.
func tryLockPatiently(f *os.File) (held bool, err error) {
	for i := 0; ; i++ {
		held, err = tryLock(f)
		if err != nil || !held || i >= lockRetries {
			return held, err
		}
		time.Sleep(lockRetryEvery)
	}
}

// inUse is the refusal of a lock held past tryLockPatiently, given the
// record then: it names the record's process only if that one is alive.
// A dead one's record is a node's that stopped (or crashed) before the
// current holder, which has not written its own yet; "kill <pid>" would
// point at whatever process has that pid now, or at none.
func inUse(rec machineHolder) error {
	if pid, err := strconv.Atoi(rec.PID); err != nil || pid <= 0 || !processAlive(pid) {
		rec = machineHolder{}
	}
	return &realNodeInUseError{holder: rec}
}

// lockMachine takes the machine lock without blocking and, if accept
// (nil: accept all) takes the previous holder's record, records this
// process and stateDir in it. It returns the lock (held until closed or
// this process exits) and the previous holder's record, empty if no real
// node ever ran since boot. A record refused leaves the file as it was:
// written, it would tell the next start that a lull real node ran, and
// that start would take the foreign paths accept refused for leftovers
// to remove.
func lockMachine(stateDir string, accept func(prev machineHolder) error) (*machineLock, machineHolder, error) {
	f, err := os.OpenFile(machineLockPath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, machineHolder{}, fmt.Errorf("open %s: %w (the real node needs root: run as root, or start without --real-node)", machineLockPath, err)
	}
	held, err := tryLockPatiently(f)
	if err != nil {
		f.Close()
		return nil, machineHolder{}, fmt.Errorf("lock %s: %w", machineLockPath, err)
	}
	b, _ := os.ReadFile(machineLockPath)
	prev := decodeHolder(string(b))
	if held {
		f.Close()
		return nil, machineHolder{}, inUse(prev)
	}
	if accept != nil {
		if err := accept(prev); err != nil {
			f.Close()
			return nil, prev, err
		}
	}
	me := machineHolder{PID: fmt.Sprint(os.Getpid()), StateDir: stateDir}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(me.encode()), 0)
	}
	if err != nil {
		f.Close()
		return nil, machineHolder{}, fmt.Errorf("write %s: %w", machineLockPath, err)
	}
	return &machineLock{f: f}, prev, nil
}

// CheckRealNodeFree returns an error matching ErrRealNodeInUse, naming
// the holder (see inUse), if another process runs this machine's real node now; nil
// otherwise. It holds nothing: Start takes the lock for itself (and may
// still find it taken). It lets a caller refuse before slow preparations,
// such as building the node's images.
func CheckRealNodeFree() error {
	f, err := os.Open(machineLockPath)
	if err != nil {
		return nil // no real node ever ran, or Start will name the problem
	}
	defer f.Close() // releases the lock if tryLock took it
	held, err := tryLockPatiently(f)
	if err != nil || !held {
		return nil
	}
	b, _ := os.ReadFile(machineLockPath)
	return inUse(decodeHolder(string(b)))
}
