// Package turnrunner is lull's reference runtime: a stand-in for an AI
// agent or notebook kernel that takes turns of random length, one after the
// other, through the runtime SDK's turn gate. It journals each turn's begin
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
	"log/slog"
	"math/rand/v2"
	"time"

	"lull.dev/lull/internal/journal"
	"lull.dev/lull/runtime"
)

// Options shape the synthetic workload. Durations are wall-clock.
type Options struct {
	// TurnMin and TurnMax bound a turn's length, drawn uniformly.
	TurnMin, TurnMax time.Duration
	// ThinkMax bounds the pause between two turns (the user typing).
	ThinkMax time.Duration
	// Journal, when set, is the file turns are journaled to.
	Journal string
	Log     *slog.Logger
}

// Run starts the SDK and takes turns until ctx is done. A turn refused
// because the session drains is journaled as refused; the client then
// waits for the gate to reopen, as a user's client would retry after
// reconnecting to the new pod.
func Run(ctx context.Context, cfg runtime.Config, opts Options) error {
	if opts.TurnMax < opts.TurnMin {
		return fmt.Errorf("turn-max (%s) is less than turn-min (%s)", opts.TurnMax, opts.TurnMin)
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	rt, err := runtime.New(cfg)
	if err != nil {
		return err
	}
	var j *journal.Writer
	if opts.Journal != "" {
		if j, err = journal.Create(opts.Journal); err != nil {
			return err
		}
		defer j.Close()
	}
	record := func(turn int, ev journal.Event) {
		if j == nil {
			return
		}
		if err := j.Write(journal.Entry{Time: time.Now(), Namespace: cfg.SessionNamespace, Session: cfg.SessionName, PodUID: cfg.PodUID, Turn: turn, Event: ev}); err != nil {
			opts.Log.Error("journal", "err", err)
		}
	}

	// The SDK's watch and reporter run beside the turns; if they stop, so
	// does the workload.
	ctx, stopTurns := context.WithCancel(ctx)
	defer stopTurns()
	runErr := make(chan error, 1)
	go func() {
		runErr <- rt.Run(ctx)
		stopTurns()
	}()

	states, cancel := rt.Subscribe()
	defer cancel()
	for turn := 1; ; turn++ {
		if !sleep(ctx, randDuration(0, opts.ThinkMax)) {
			return <-runErr
		}
		t, err := rt.BeginTurn(runtime.TurnOptions{})
		for errors.Is(err, runtime.ErrDraining) {
			record(turn, journal.Refused)
			if !waitAccepting(ctx, rt, states) {
				return <-runErr
			}
			t, err = rt.BeginTurn(runtime.TurnOptions{})
		}
		if err != nil {
			return err
		}
		record(turn, journal.Begin)
		if !sleep(ctx, randDuration(opts.TurnMin, opts.TurnMax)) {
			// Stopped mid-turn: the work is lost. The journal keeps the
			// begin without an end, which is what the auditor counts.
			return <-runErr
		}
		record(turn, journal.End)
		t.End()
	}
}

// waitAccepting blocks until the gate accepts turns again.
func waitAccepting(ctx context.Context, rt *runtime.Runtime, states <-chan runtime.Snapshot) bool {
	for !rt.Snapshot().Accepting {
		select {
		case <-ctx.Done():
			return false
		case <-states:
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
