package devcmd

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"lull.dev/lull/internal/controller/session"
	"lull.dev/lull/internal/dev/bench"
	"lull.dev/lull/internal/dev/localenv"
)

// newBenchRestartCommand is `lull bench restart`: a subcommand, not a
// flag of `lull bench`, since it measures another thing with flags of its
// own (--mid-drain, --quiet, --window).
func newBenchRestartCommand() *cobra.Command {
	o := bench.RestartOptions{Namespace: "bench-restart", Sessions: 1000, Timeout: 20 * time.Minute}
	plane := newPlaneFlags()
	cmd := &cobra.Command{
		Use:   "restart",
		Short: "Measure a controller crash and restart with many sessions mid-drain",
		Long: `Start the local control plane (as lull bench does, runtimes in fleet mode),
create --sessions sessions whose runtimes are each in a turn that outlasts the
run, roll out a runtime update under Drain with maxUnavailable --mid-drain (so
that many sessions have a drain request outstanding and none can finish),
wait until the controller has written nothing for --quiet, record every drain
request, kill the controller (SIGKILL) and start it again.

Prints, from the new process's start: time until ready, until its first
Session reconcile, until every session was reconciled once, until its first
write; the writes it issued until it was quiet again (or --window passed) by
request and by status-write reason; the drain requests kept, re-issued with
a new ID, withdrawn or newly issued; its RSS. Exits non-zero if a target is
missed: no session status write and no write to a session's objects on
start-up, no request re-issued or withdrawn, none issued beyond the wave.
See docs/benchmarks.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			if o.Sessions < 1 {
				return fmt.Errorf("--sessions must be at least 1, got %d", o.Sessions)
			}
			if o.MidDrain < 0 || o.MidDrain > o.Sessions {
				return fmt.Errorf("--mid-drain must be between 1 and --sessions (%d), got %d (0: 20%% of the sessions)", o.Sessions, o.MidDrain)
			}
			if o.Quiet <= session.SettleDelay {
				return fmt.Errorf("--quiet must be longer than %s (the delay after which the controller writes a passing state), got %s", session.SettleDelay, o.Quiet)
			}
			return runOnPlane(cmd, plane, "lull-bench-restart-*", func(ctx context.Context, env *localenv.Env, out io.Writer) (func(io.Writer) bool, error) {
				o.Out, o.Runtimes = out, plane.runtimes
				r, err := bench.RunRestart(ctx, env, o)
				return r.Print, err
			})
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Sessions, "sessions", o.Sessions, "number of sessions")
	f.IntVar(&o.MidDrain, "mid-drain", 0, "sessions with a drain request outstanding at the kill: the template's maxUnavailable (default 20% of --sessions)")
	f.DurationVar(&o.Quiet, "quiet", 10*time.Second, "how long without a controller write counts as quiet, before the kill and to end the measurement after it (more than 5s)")
	f.DurationVar(&o.Window, "window", 2*time.Minute, "longest the restarted controller is watched")
	f.DurationVar(&o.Timeout, "timeout", o.Timeout, "limit for the sessions to start and for the drain requests to be issued")
	plane.bind(f)
	return cmd
}
