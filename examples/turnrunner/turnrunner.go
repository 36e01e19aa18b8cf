// Package turnrunner is lull's reference runtime: a stand-in for an AI
// agent or notebook kernel that takes turns of random length, one after the
// other, through the runtime SDK's turn gate, or, in a pod with the
// injected agent sidecar, through the agent's HTTP API on its unix socket. It journals each turn's begin
// and end with its pod UID so an independent auditor can tell whether a
// rollout interrupted any work. `lull example-runtime` runs it; under
// `lull dev` every session pod runs one.
//
// What a real runtime would do in a turn (call a model, run a cell) is a
// sleep here; everything around it (the gate, the drain, the reports) is
// what a real runtime does.
package turnrunner

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"lull.dev/lull/internal/dev/journal"
	"lull.dev/lull/runtimesdk"
)

// Options shape the synthetic workload. Durations are wall-clock.
type Options struct {
	// TurnMin and TurnMax bound a turn's length, drawn uniformly.
	TurnMin, TurnMax time.Duration
	// ThinkMax bounds the pause between two turns (the user typing).
	ThinkMax time.Duration
	// Turns, when positive, is how many turns the user takes before
	// leaving: the runtime then stays up, idle, until its pod goes.
	Turns int
	// Journal, when set, is the file turns are journaled to.
	Journal string
	// Workspace, when set, is a directory the session keeps across pod
	// replacements (a PersistentVolumeClaim's mount): each turn reads which
	// pods wrote there before, journals them, and appends its own line to
	// turns.log, as an agent edits the files of its session.
	Workspace string
	Log       *slog.Logger
}

// errDraining is a turn refused because the session drains.
var errDraining = errors.New("session is draining")

// gate is how the workload takes turns: through the runtime SDK in this
// process, or through the lull agent sidecar's HTTP API on its socket.
type gate interface {
	// run serves the gate until ctx is done.
	run(ctx context.Context) error
	// begin begins a turn; errDraining while the session drains. end ends
	// it.
	begin(ctx context.Context) (end func() error, err error)
	// waitAccepting blocks until turns are accepted again; false once ctx
	// is done.
	waitAccepting(ctx context.Context) bool
	// notices sends what the runtime is told without being asked (a drain
	// deadline, a pending update) each time it changes, until ctx is done.
	notices(ctx context.Context) <-chan notice
}

// notice is what a runtime shows its user about an update.
type notice struct {
	deadline      time.Time
	updatePending bool
}

// Run takes turns until ctx is done: through the agent sidecar's socket
// when agentSocket is set (the runtime holds no credentials then), through
// the runtime SDK with cfg otherwise. A turn refused because the session
// drains is journaled as refused; the client then waits for the gate to
// reopen, as a user's client would retry after reconnecting to the new pod.
// (A turn refused because the session is being suspended for inactivity
// wakes it: the gate reopens in this pod once the controller withdraws the
// request.)
func Run(ctx context.Context, cfg runtimesdk.Config, agentSocket string, opts Options) error {
	if opts.TurnMax < opts.TurnMin {
		return fmt.Errorf("turn-max (%s) is less than turn-min (%s)", opts.TurnMax, opts.TurnMin)
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	var g gate
	if agentSocket != "" {
		g = newAgentGate(agentSocket)
	} else {
		rt, err := runtimesdk.New(cfg)
		if err != nil {
			return err
		}
		g = newSDKGate(rt)
	}
	var j *journal.Writer
	if opts.Journal != "" {
		var err error
		if j, err = journal.Create(opts.Journal); err != nil {
			return err
		}
		defer j.Close()
	}
	record := func(turn int, ev journal.Event, workspacePods []string) {
		if j == nil {
			return
		}
		if err := j.Write(journal.Entry{Time: time.Now(), Namespace: cfg.SessionNamespace, Session: cfg.SessionName, PodUID: cfg.PodUID, Turn: turn, Event: ev, WorkspacePods: workspacePods}); err != nil {
			opts.Log.Error("journal", "err", err)
		}
	}

	// The gate runs beside the turns; if it stops, so does the workload.
	ctx, stopTurns := context.WithCancel(ctx)
	defer stopTurns()
	runErr := make(chan error, 1)
	go func() {
		runErr <- g.run(ctx)
		stopTurns()
	}()

	go func() {
		// A real runtime would show these to its user ("your session
		// restarts for an update in 4m30s"); this one journals them.
		for n := range g.notices(ctx) {
			e := journal.Entry{Time: time.Now(), Namespace: cfg.SessionNamespace, Session: cfg.SessionName, PodUID: cfg.PodUID,
				Event: journal.Notice, UpdatePending: n.updatePending}
			if !n.deadline.IsZero() {
				e.Deadline = &n.deadline
				opts.Log.Info("session restarts for an update", "deadline", n.deadline, "in", time.Until(n.deadline).Round(time.Second))
			}
			if j != nil {
				if err := j.Write(e); err != nil {
					opts.Log.Error("journal", "err", err)
				}
			}
		}
	}()

	for turn := 1; ; turn++ {
		if opts.Turns > 0 && turn > opts.Turns {
			opts.Log.Info("the user has left; idle until the pod goes", "turns", opts.Turns)
			<-ctx.Done()
			return <-runErr
		}
		if !sleep(ctx, randDuration(0, opts.ThinkMax)) {
			return <-runErr
		}
		end, err := g.begin(ctx)
		for errors.Is(err, errDraining) {
			record(turn, journal.Refused, nil)
			if !g.waitAccepting(ctx) {
				return <-runErr
			}
			end, err = g.begin(ctx)
		}
		if err != nil {
			if ctx.Err() != nil {
				return <-runErr
			}
			return err
		}
		var pods []string
		if opts.Workspace != "" {
			if pods, err = workTheWorkspace(opts.Workspace, string(cfg.PodUID), turn); err != nil {
				opts.Log.Error("workspace", "dir", opts.Workspace, "err", err)
			}
		}
		record(turn, journal.Begin, pods)
		if !sleep(ctx, randDuration(opts.TurnMin, opts.TurnMax)) {
			// Stopped mid-turn: the work is lost. The journal keeps the
			// begin without an end, which is what the auditor counts.
			return <-runErr
		}
		record(turn, journal.End, nil)
		if err := end(); err != nil {
			opts.Log.Error("end turn", "turn", turn, "err", err)
		}
	}
}

// workTheWorkspace reads dir/turns.log, returns the pods that wrote it
// (sorted), and appends "<pod> <turn>" for this turn.
func workTheWorkspace(dir, pod string, turn int) ([]string, error) {
	path := filepath.Join(dir, "turns.log")
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if p, _, ok := strings.Cut(line, " "); ok {
			seen[p] = true
		}
	}
	pods := slices.Sorted(maps.Keys(seen))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return pods, err
	}
	defer f.Close()
	_, err = fmt.Fprintf(f, "%s %d\n", pod, turn)
	return pods, err
}

// sdkGate takes turns through the runtime SDK.
type sdkGate struct {
	rt     *runtimesdk.Runtime
	states <-chan runtimesdk.Snapshot
}

func newSDKGate(rt *runtimesdk.Runtime) *sdkGate {
	states, _ := rt.Subscribe() // for the life of the process
	return &sdkGate{rt: rt, states: states}
}

func (g *sdkGate) run(ctx context.Context) error { return g.rt.Run(ctx) }

func (g *sdkGate) begin(context.Context) (func() error, error) {
	t, err := g.rt.BeginTurn(runtimesdk.TurnOptions{})
	if errors.Is(err, runtimesdk.ErrDraining) {
		return nil, errDraining
	}
	if err != nil {
		return nil, err
	}
	return func() error { t.End(); return nil }, nil
}

func (g *sdkGate) notices(ctx context.Context) <-chan notice {
	snaps, cancel := g.rt.Subscribe()
	return dedupNotices(ctx, func(ctx context.Context) (notice, bool) {
		select {
		case <-ctx.Done():
			cancel()
			return notice{}, false
		case s := <-snaps:
			return notice{deadline: s.Deadline, updatePending: s.UpdatePending}, true
		}
	})
}

// dedupNotices sends each notice next returns that differs from the last
// one sent, until next returns false.
func dedupNotices(ctx context.Context, next func(context.Context) (notice, bool)) <-chan notice {
	out := make(chan notice)
	go func() {
		defer close(out)
		var last notice
		for {
			n, ok := next(ctx)
			if !ok {
				return
			}
			if n == last {
				continue
			}
			last = n
			select {
			case out <- n:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

func (g *sdkGate) waitAccepting(ctx context.Context) bool {
	for !g.rt.Snapshot().Accepting {
		select {
		case <-ctx.Done():
			return false
		case <-g.states:
		case <-time.After(time.Second):
		}
	}
	return true
}

func randDuration(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + rand.N(hi-lo)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
