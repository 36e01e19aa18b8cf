package cli

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"lull.dev/lull/internal/bench"
	"lull.dev/lull/internal/localenv"
	"lull.dev/lull/internal/podprocess"
)

func init() { subcommands = append(subcommands, newBenchCommand) }

func newBenchCommand() *cobra.Command {
	o := bench.Options{Namespace: "bench", Sessions: 200, Timeout: 10 * time.Minute}
	var (
		stateDir string
		// Thousands of host processes do not fit on one machine; a
		// goroutine per pod speaks the same protocol (docs/benchmarks.md).
		runtimes = podprocess.ModeFleet
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure a Drain rollout of many idle sessions on the local control plane",
		Long: `Start the local control plane (as lull dev does), create --sessions sessions
whose runtimes are idle, roll out a runtime update under the Drain strategy,
and print: time to converge, controller API writes per replaced session,
Drained-report-to-delete latency (p50/p99), controller peak RSS and CPU.
Exits non-zero if a target is missed. See docs/benchmarks.md.

The runtimes run in fleet mode by default: one goroutine per session pod in
this process, each with its own pod-bound token, Session watch, reporter
and journal (--runtimes=process gives each pod a host process, as lull dev
does).`,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			if o.Sessions < 1 {
				return fmt.Errorf("--sessions must be at least 1, got %d", o.Sessions)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			out := cmd.OutOrStdout()
			dir, err := newStateDir(stateDir, "lull-bench-*")
			if err != nil {
				return err
			}
			defer func() { err = dir.finish(err) }()
			env, err := localenv.Up(ctx, localenv.Options{StateDir: dir.path, Progress: out, Runtimes: runtimes})
			if err != nil {
				return err
			}
			defer func() {
				if derr := env.Down(); derr != nil && err == nil {
					err = derr
				}
			}()
			o.Out, o.Runtimes = out, runtimes
			r, err := bench.Run(ctx, env, o)
			if err != nil {
				return err
			}
			if !r.Print(out) {
				return errors.New("a benchmark target was missed")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Sessions, "sessions", o.Sessions, "number of sessions")
	f.DurationVar(&o.Timeout, "timeout", o.Timeout, "limit for the sessions to start and for the rollout")
	f.Var(&runtimes, "runtimes", "how session pods' runtimes run: fleet (a goroutine per pod in this process) or process (a host process per pod)")
	f.StringVar(&stateDir, "state-dir", "", "directory for the cluster's state and logs, kept on exit (default: a new temp dir, removed on exit unless the run fails)")
	cmd.AddCommand(newBenchRestartCommand())
	return cmd
}
