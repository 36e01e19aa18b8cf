package podprocess

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/debug"
	"time"

	"k8s.io/client-go/rest"
)

// Mode is how the runner runs a pod's runtime container. It is a
// pflag.Value, so a command can take it as a flag.
type Mode string

const (
	// ModeProcess runs each pod's runtime container as a host process of
	// Options.Command: the default, the zero value.
	ModeProcess Mode = "process"
	// ModeFleet runs each pod's runtime container as a goroutine of this
	// process, running Options.Program: thousands of runtimes fit on one
	// machine. Each still has its own pod-bound token, environment, log
	// and journal; their API clients share one transport (see Invocation).
	// The agent sidecar, where a pod has one, still runs as a process.
	ModeFleet Mode = "fleet"
)

func (m Mode) String() string {
	if m == "" {
		return string(ModeProcess)
	}
	return string(m)
}

// Set accepts "process" or "fleet".
func (m *Mode) Set(s string) error {
	switch Mode(s) {
	case ModeProcess, ModeFleet:
		*m = Mode(s)
		return nil
	}
	return fmt.Errorf("want %s (a host process per pod) or %s (a goroutine per pod in this process)", ModeProcess, ModeFleet)
}

// Type names the flag's value in help.
func (Mode) Type() string { return "process|fleet" }

// Program is a runtime run in the runner's own process in ModeFleet: what
// its host process's main would do with inv, until ctx is done. Returning,
// with nil or an error, is the container exiting: it is restarted as a
// crashed process is. A panic is recovered and counts as an exit with
// status 2, as an unrecovered panic ends a Go process.
type Program func(ctx context.Context, inv Invocation) error

// Invocation is what the runner hands a Program in place of a process's
// command line, environment and output.
type Invocation struct {
	// Args are the container's arguments, mount paths rewritten as for a
	// process.
	Args []string
	// Env is the container's environment, "KEY=value", as a process would
	// get it: the pod's variables, KUBECONFIG with the pod-bound token,
	// LULL_JOURNAL, LULL_DEV_MOUNTS.
	Env []string
	// Output is the container's log (its stdout and stderr).
	Output io.Writer
	// Transport is the one transport every runtime of the fleet sends its
	// API requests through (one pool of HTTP/2 connections to the API
	// server, TLS set up once), instead of a pool per runtime; each request
	// still carries its runtime's own token, on its own watch.
	Transport http.RoundTripper
}

// RuntimeRequests returns how many API requests the in-process runtimes
// (ModeFleet) have sent through their shared transport since the runner
// was made, by "VERB resource" (see requestmetrics.Tally: a watch counts
// once, as WATCH, when it is opened); nil in ModeProcess, whose runtimes'
// requests this process does not see.
func (r *Runner) RuntimeRequests() map[string]int64 {
	if r.requests == nil {
		return nil
	}
	return r.requests.Counts()
}

// exitError is how an in-process runtime ended on its own, as a process's
// exit status.
type exitError struct {
	code int32
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// sharedTransport returns the transport of a fleet: TLS to server with the
// cluster's CA, no credentials (each runtime adds its own token).
func sharedTransport(server, caFile string) (http.RoundTripper, error) {
	return rest.TransportFor(&rest.Config{Host: server, TLSClientConfig: rest.TLSClientConfig{CAFile: caFile}})
}

// launchProgram runs c's Program in a goroutine, its output appended to
// c's log. Stopping it cancels its context; it cannot be killed (see
// terminate). r.mu must be held.
func (r *Runner) launchProgram(p *proc, c *container) error {
	pod := p.pod
	logf, err := os.OpenFile(c.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	cur := &run{started: time.Now(), done: make(chan struct{}), term: cancel}
	c.cur = cur
	inv := Invocation{Args: c.args, Env: c.env, Output: logf, Transport: r.transport}
	// Not in r.wg: a program that overran its grace period is abandoned,
	// and must not hold up the runner's return.
	go func() {
		defer cancel()
		cur.err = runProgram(ctx, c.program, inv)
		logf.Close()
		close(cur.done)
		r.logf("pod %s/%s (%s): container %s returned: %v\n", pod.Namespace, pod.Name, pod.UID, c.name, exitText(cur.err))
	}()
	r.logf("pod %s/%s (%s): container %s started in this process (fleet)\n", pod.Namespace, pod.Name, pod.UID, c.name)
	return nil
}

// runProgram runs prog, turning what it returns into an exit: nil for a
// return of nil, status 1 for an error, 2 for a panic (its stack goes to
// the container's log, as a Go process prints it).
func runProgram(ctx context.Context, prog Program, inv Invocation) (err error) {
	defer func() {
		if v := recover(); v != nil {
			fmt.Fprintf(inv.Output, "panic: %v\n\n%s", v, debug.Stack())
			err = &exitError{code: 2, msg: fmt.Sprintf("exit status 2 (panic: %v)", v)}
		}
	}()
	if err := prog(ctx, inv); err != nil {
		fmt.Fprintf(inv.Output, "Error: %v\n", err)
		return &exitError{code: 1, msg: fmt.Sprintf("exit status 1 (%v)", err)}
	}
	return nil
}

// programExitCode is exitCode for an in-process runtime; ok is false for
// an error that is not its exit.
func programExitCode(err error) (code int32, ok bool) {
	var e *exitError
	if errors.As(err, &e) {
		return e.code, true
	}
	return 0, false
}
