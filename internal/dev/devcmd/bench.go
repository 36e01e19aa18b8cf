package devcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/intstr"

	"lull.dev/lull/internal/dev/bench"
	"lull.dev/lull/internal/dev/localenv"
	"lull.dev/lull/internal/dev/podprocess"
)

func init() { subcommands = append(subcommands, newBenchCommand) }

func newBenchCommand() *cobra.Command {
	o := bench.Options{Namespace: "bench", Sessions: 1000, IdleWindow: 65 * time.Second, MaxUnavailable: bench.DefaultMaxUnavailable}
	plane := newPlaneFlags()
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure a Drain rollout of many idle sessions on the local control plane, against the API server's floor",
		Long: `Start the local control plane (as lull dev does) and measure, in one run:

1. the floors: a raw rollout of --sessions plain StatefulSets (image
   patched, stale pods deleted by a plain client as fast as the API server
   takes them); the protocol floor, with lull's controller stopped: a plain
   client doing the drain protocol's minimal sequence (drain request,
   Drained report, delete, recreation, new report) for --sessions
   sessions; then the API server's write→watch latency of one object;
2. lull: --sessions sessions whose runtimes are idle, one runtime update
   under the Drain strategy: time to converge and its ratios to the raw
   rollout and to the protocol floor, Drained-report-to-delete latency (p50/p99) and its ratio to
   the write→watch p99, controller API writes per replaced session, work
   queue depth and reconcile latency, controller peak RSS and CPU;
3. what idle, current sessions cost: the controller's and the runtimes'
   API requests per minute per session over --idle-window.

Prints every figure with its target and exits non-zero if a target is
missed. See docs/benchmarks.md.

The runtimes run in fleet mode by default: one goroutine per session pod in
this process, each with its own pod-bound token, Session watch, reporter
and journal (--runtimes=process gives each pod a host process, as lull dev
does).`,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			if o.Sessions < 1 {
				return fmt.Errorf("--sessions must be at least 1, got %d", o.Sessions)
			}
			if o.IdleWindow < time.Second {
				return fmt.Errorf("--idle-window must be at least 1s, got %s", o.IdleWindow)
			}
			return runOnPlane(cmd, plane, "lull-bench-*", func(ctx context.Context, env *localenv.Env, out io.Writer) (func(io.Writer) bool, error) {
				o.Out, o.Runtimes = out, plane.runtimes
				r, err := bench.Run(ctx, env, o)
				return r.Print, err
			})
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Sessions, "sessions", o.Sessions, "number of sessions")
	f.DurationVar(&o.Timeout, "timeout", 0, "limit of each wait (the raw rollout, the sessions' start, the rollout); 0 means 10m or 360ms per session, whichever is longer")
	f.Var(intOrPercent{&o.MaxUnavailable}, "max-unavailable", "the template's maxUnavailable: a count or a percentage of the sessions (100%: every session drains at once, as the raw rollout replaces every pod at once)")
	f.DurationVar(&o.IdleWindow, "idle-window", o.IdleWindow, "how long idle, current sessions' API requests are counted after the rollout (longer than the runtimes' 60s report refresh)")
	plane.bind(f)
	cmd.AddCommand(newBenchRestartCommand())
	return cmd
}

// planeFlags are the flags the bench commands share: where the local
// control plane keeps its state, how session pods' runtimes run, and
// extra controller arguments.
type planeFlags struct {
	stateDir string
	runtimes podprocess.Mode
	// controllerArgs are added to the controller's command line, e.g.
	// --pprof-bind-address to profile it while it is measured.
	controllerArgs []string
}

func newPlaneFlags() *planeFlags {
	// Thousands of host processes do not fit on one machine; a goroutine
	// per pod speaks the same protocol (docs/benchmarks.md).
	return &planeFlags{runtimes: podprocess.ModeFleet}
}

func (p *planeFlags) bind(f *pflag.FlagSet) {
	f.Var(&p.runtimes, "runtimes", "how session pods' runtimes run: fleet (a goroutine per pod in this process) or process (a host process per pod)")
	f.StringVar(&p.stateDir, "state-dir", "", "directory for the cluster's state and logs, kept on exit (default: a new temp dir, removed on exit unless the run fails)")
	f.StringArrayVar(&p.controllerArgs, "controller-arg", nil, "an argument added to the controller's command line (repeatable), e.g. --controller-arg=--pprof-bind-address=127.0.0.1:6060 to profile it")
}

// runOnPlane starts the local control plane in a state directory
// (plane.stateDir, or a new temp dir named by pattern), runs measure on
// it, prints its figures and stops the plane. It returns an error when
// measure does, or when a target is missed (print reports false); the
// state directory is kept when it fails.
func runOnPlane(cmd *cobra.Command, plane *planeFlags, pattern string,
	measure func(ctx context.Context, env *localenv.Env, out io.Writer) (print func(io.Writer) bool, err error)) (err error) {
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := cmd.OutOrStdout()
	dir, err := newStateDir(plane.stateDir, pattern)
	if err != nil {
		return err
	}
	defer func() { err = dir.finish(err) }()
	env, err := localenv.Up(ctx, localenv.Options{StateDir: dir.path, Progress: out, Runtimes: plane.runtimes, ControllerArgs: plane.controllerArgs})
	if err != nil {
		return err
	}
	defer func() {
		if derr := env.Down(); derr != nil && err == nil {
			err = derr
		}
	}()
	print, err := measure(ctx, env, out)
	if err != nil {
		return err
	}
	if !print(out) {
		return errors.New("a benchmark target was missed")
	}
	return nil
}

// intOrPercent is a flag holding a count ("50") or a percentage ("25%"),
// as a template's maxUnavailable does.
type intOrPercent struct{ v *intstr.IntOrString }

func (f intOrPercent) String() string {
	if f.v == nil {
		return ""
	}
	return f.v.String()
}

func (f intOrPercent) Set(s string) error {
	if n, ok := strings.CutSuffix(s, "%"); ok {
		p, err := strconv.Atoi(n)
		if err != nil || p < 1 || p > 100 {
			return fmt.Errorf("want a percentage from 1%% to 100%%, got %q", s)
		}
		*f.v = intstr.FromString(s)
		return nil
	}
	c, err := strconv.Atoi(s)
	if err != nil || c < 1 {
		return fmt.Errorf("want a count of at least 1 or a percentage like 25%%, got %q", s)
	}
	*f.v = intstr.FromInt32(int32(c))
	return nil
}

func (intOrPercent) Type() string { return "count|percent" }
