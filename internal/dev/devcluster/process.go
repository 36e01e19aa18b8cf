package devcluster

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stopGrace is how long a process gets between SIGTERM and SIGKILL.
const stopGrace = 5 * time.Second

// process is one running child: its own process group, output appended to
// its log file.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when Wait returned
	waitErr error         // valid after done is closed

	stopOnce sync.Once
}

// startProcess starts bin with args, output to logPath (created or
// appended to, headed by the command line).
func startProcess(name, logPath, bin string, args []string) (*process, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child holds its own descriptor
	fmt.Fprintf(f, "# %s %s %s\n", time.Now().Format(time.RFC3339), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = sysProcAttr()
	if err := spawn(cmd); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// pid returns the process id, which is also its process group id.
func (p *process) pid() int { return p.cmd.Process.Pid }

// exitErr returns a non-nil error once the process has exited.
func (p *process) exitErr() error {
	select {
	case <-p.done:
		if p.waitErr != nil {
			return fmt.Errorf("%s exited: %w", p.name, p.waitErr)
		}
		return fmt.Errorf("%s exited", p.name)
	default:
		return nil
	}
}

// stop sends SIGTERM to the process group, SIGKILL after grace, and waits
// for the process. It reports whether the process had already exited on
// its own (crashed) before stop was called.
func (p *process) stop(grace time.Duration) (crashed error, err error) {
	p.stopOnce.Do(func() {
		if crashed = p.exitErr(); crashed != nil {
			p.killGroup(syscall.SIGKILL) // leftover group members, if any
			return
		}
		if kerr := p.killGroup(syscall.SIGTERM); kerr != nil {
			err = kerr
		}
		select {
		case <-p.done:
		case <-time.After(grace):
			if kerr := p.killGroup(syscall.SIGKILL); kerr != nil {
				err = kerr
			}
			<-p.done
		}
		p.killGroup(syscall.SIGKILL)
	})
	return crashed, err
}

// killGroup signals every process of the group; a group that is gone is
// not an error.
func (p *process) killGroup(sig syscall.Signal) error {
	if err := signalGroup(p.pid(), sig); err != nil {
		return fmt.Errorf("signal %s (pid %d): %w", p.name, p.pid(), err)
	}
	return nil
}

// spawnRequests feeds the spawner goroutine.
var (
	spawnOnce     sync.Once
	spawnRequests chan spawnRequest
)

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

// spawn starts cmd from one OS thread that lives as long as this process.
// Linux sends Pdeathsig when the thread that forked the child exits, not
// the process, so forking from an arbitrary goroutine's thread could kill
// children early if the runtime retired that thread.
func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnRequests = make(chan spawnRequest)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread never exits
			for r := range spawnRequests {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawnRequests <- spawnRequest{cmd: cmd, done: done}
	return <-done
}

// logTail returns the last n lines of a log file, indented, for error
// messages.
func logTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	var b strings.Builder
	for _, l := range lines {
		if len(l) > 400 {
			l = append(l[:400:400], "…"...)
		}
		b.WriteString("    ")
		b.Write(l)
		b.WriteByte('\n')
	}
	return b.String()
}
