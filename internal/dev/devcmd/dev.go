package devcmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/controller/filesweep"
	"lull.dev/lull/internal/dev/demo"
	"lull.dev/lull/internal/dev/devcluster"
	"lull.dev/lull/internal/dev/localenv"
	"lull.dev/lull/internal/dev/podprocess"
)

func init() { subcommands = append(subcommands, newDevCommand) }

func newDevCommand() *cobra.Command {
	var (
		stateDir string
		runDemo  bool
		keep     bool
		strategy string
		d        = demo.Defaults()

		sweepInterval, sweepGrace time.Duration
		runtimes                  = podprocess.ModeProcess
		realNode                  bool
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run lull on a local control plane (etcd, kube-apiserver, controllers, KWOK)",
		Long: `Start a local Kubernetes control plane on this machine (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and KWOK with one simulated node),
install lull, and run the controller. Every running session pod gets a
runtime process on this host, authenticated as the session's ServiceAccount.

With --demo, create sessions whose runtimes take turns, roll out a runtime
update under the Drain strategy, show progress and print a summary; exit
non-zero if any turn was interrupted.

With --demo --strategy Passive, the templates have an idle limit
(--idle-suspend-after) and a maximum lifetime (--max-lifetime); most
sessions' users take a few turns and leave, a few keep working. The update
drains no session: each moves when it is suspended for idleness (the demo
resumes it a few seconds later, as its user coming back) or restarted at
its maximum lifetime. The demo prints the convergence window the
controller predicts (status.expectedCompletion) and, at the end, the
prediction against the actual time.

With --real-node, a real node joins beside the simulated one: containerd,
runc and a kubelet on this machine (Linux, root, the Debian packages
containerd, runc and containernetworking-plugins, the kubelet from 'make
tools'), with lull's images, the reference runtime's and a pause image
built from source and imported into its containerd. With --demo, every
session then runs on it as real containers (docs/real-node.md). One real
node runs per machine; on exit, and at the next start after a crash,
everything it wrote outside the state directory is removed.

Ctrl-C stops every process lull dev started. Without --state-dir, state and
logs go to a new temporary directory that is removed on exit, unless the
demo failed: then it is kept and named. A --state-dir is never removed. The
binaries come from 'make tools' (hack/build-tools.sh).`,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			d.Strategy = lullv1.UpdateStrategy(strategy)
			d.RealNode = realNode
			if err := validateDemo(d, cmd.Flags().Changed); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			out := cmd.OutOrStdout()
			dir, err := newStateDir(stateDir, "lull-dev-*")
			if err != nil {
				return err
			}
			defer func() { err = dir.finish(err) }()

			env, err := localenv.Up(ctx, localenv.Options{StateDir: dir.path, Progress: out, Runtimes: runtimes, RealNode: realNode,
				ControllerArgs: []string{"--files-sweep-interval=" + sweepInterval.String(), "--files-sweep-grace=" + sweepGrace.String()}})
			if err != nil {
				if !runDemo && interrupted(ctx) {
					return nil // Ctrl-C while starting: nothing went wrong
				}
				return err
			}
			defer func() {
				fmt.Fprintln(out, "stopping the local control plane")
				if derr := env.Down(); derr != nil && err == nil {
					err = derr // a component crashed: keep its log
				}
			}()
			fmt.Fprintf(out, "\nlocal control plane ready; state and logs in %s%s\n  export KUBECONFIG=%s\n",
				env.Cluster.StateDir, dir.note(runDemo), env.Cluster.Kubeconfig)
			if !runDemo {
				fmt.Fprintln(out, "press Ctrl-C to stop")
				<-ctx.Done()
				return nil
			}
			d.Out = out
			summary, err := demo.Run(ctx, env, d)
			if err != nil {
				return err
			}
			summary.Print(out)
			if keep {
				fmt.Fprintln(out, "\n--keep: the cluster keeps running; press Ctrl-C to stop")
				<-ctx.Done()
			}
			if !summary.OK() {
				return fmt.Errorf("demo failed: %d turns interrupted, %d violations", summary.TurnsInterrupted, len(summary.Violations))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&stateDir, "state-dir", "", "directory for certificates, kubeconfig, logs and etcd data, kept on exit (default: a new temp dir, removed on exit unless the demo failed)")
	f.BoolVar(&runDemo, "demo", false, "run the rollout demo and print a summary")
	f.BoolVar(&keep, "keep", false, "with --demo, keep the cluster running after the summary")
	f.IntVar(&d.Sessions, "sessions", d.Sessions, "demo: number of sessions")
	f.DurationVar(&d.TurnMin, "turn-min", d.TurnMin, "demo: shortest turn")
	f.DurationVar(&d.TurnMax, "turn-max", d.TurnMax, "demo: longest turn")
	f.StringVar(&strategy, "strategy", string(d.Strategy), "demo: update strategy of the rollout, Drain or Passive")
	f.DurationVar(&d.IdleSuspendAfter, "idle-suspend-after", d.IdleSuspendAfter, "demo, with --strategy Passive: the templates' idle.suspendAfter")
	f.DurationVar(&d.MaxLifetime, "max-lifetime", d.MaxLifetime, "demo, with --strategy Passive: the templates' maxLifetime (at least 1m)")
	f.Var(&runtimes, "runtimes", "how session pods' runtimes run: process (a host process per pod, as a kubelet would) or fleet (a goroutine per pod in this process, as lull bench runs them; see docs/benchmarks.md)")
	f.BoolVar(&realNode, "real-node", false, "add a real node (containerd, runc, kubelet on this machine; Linux and root) beside the simulated one; with --demo, every session runs on it as real containers")
	f.DurationVar(&sweepInterval, "files-sweep-interval", filesweep.DefaultInterval, "the controller's --files-sweep-interval: longest time between two passes of the files sweeper")
	f.DurationVar(&sweepGrace, "files-sweep-grace", filesweep.DefaultGrace, "the controller's --files-sweep-grace: how long a files ConfigMap must be unchanged before the sweeper may delete it")
	return cmd
}

// passiveOnly are the demo flags that apply under --strategy Passive only.
var passiveOnly = []string{"idle-suspend-after", "max-lifetime"}

// validateDemo checks the demo's options; changed reports whether the user
// set a flag.
func validateDemo(d demo.Options, changed func(flag string) bool) error {
	if d.Sessions < 1 {
		return fmt.Errorf("--sessions must be at least 1, got %d", d.Sessions)
	}
	if d.TurnMin < 0 || d.TurnMax < 0 {
		return fmt.Errorf("--turn-min (%s) and --turn-max (%s) must not be negative", d.TurnMin, d.TurnMax)
	}
	if d.TurnMin > d.TurnMax {
		return fmt.Errorf("--turn-min (%s) must not be greater than --turn-max (%s)", d.TurnMin, d.TurnMax)
	}
	switch d.Strategy {
	case lullv1.UpdateStrategyDrain:
		for _, f := range passiveOnly {
			if changed(f) {
				return fmt.Errorf("--%s applies to --strategy Passive only", f)
			}
		}
		return nil
	case lullv1.UpdateStrategyPassive:
		if d.RealNode {
			return errors.New("--real-node plays the Drain demo only: drop --strategy Passive, or --real-node")
		}
	default:
		return fmt.Errorf("--strategy must be Drain or Passive, got %q", d.Strategy)
	}
	if d.IdleSuspendAfter <= 0 {
		return fmt.Errorf("--idle-suspend-after (%s) must be positive: the sessions whose users leave converge when suspended for idleness", d.IdleSuspendAfter)
	}
	if d.MaxLifetime < time.Minute {
		return fmt.Errorf("--max-lifetime (%s) must be at least 1m, the shortest spec.maxLifetime allows", d.MaxLifetime)
	}
	return nil
}

// stateDir is where a local environment keeps its certificates, logs and
// etcd data: the --state-dir the user gave, which is never removed, or a
// new temporary directory, removed after a run that succeeded.
type stateDir struct {
	path string
	temp bool
}

// newStateDir returns the directory given, or creates a temporary one
// named by pattern (see os.MkdirTemp).
func newStateDir(given, pattern string) (stateDir, error) {
	if given != "" {
		return stateDir{path: given}, nil
	}
	path, err := os.MkdirTemp("", pattern)
	if err != nil {
		return stateDir{}, fmt.Errorf("create a state directory: %w", err)
	}
	return stateDir{path: path, temp: true}, nil
}

// note tells the user what becomes of the directory.
func (d stateDir) note(keptOnFailure bool) string {
	switch {
	case !d.temp:
		return ""
	case keptOnFailure:
		return " (removed on exit unless the run fails)"
	default:
		return " (removed on exit)"
	}
}

// finish ends a run whose result is err: a temporary directory is removed
// if the run succeeded; otherwise the directory is kept and the error
// says where.
func (d stateDir) finish(err error) error {
	if err == nil {
		if d.temp {
			if rerr := os.RemoveAll(d.path); rerr != nil {
				return fmt.Errorf("remove %s: %w", d.path, rerr)
			}
		}
		return nil
	}
	refused := errors.Is(err, devcluster.ErrRealNodeInUse) || errors.Is(err, devcluster.ErrRealNodeRefused)
	if refused && d.temp {
		_ = os.RemoveAll(d.path) // refused before anything was written
		return err
	}
	if _, serr := os.Stat(d.path); serr != nil || errors.Is(err, devcluster.ErrStateDirInUse) || refused {
		return err // nothing of this run's to keep
	}
	return fmt.Errorf("%w\nlogs kept in %s", err, d.path)
}

// interrupted reports whether ctx ended because of Ctrl-C or SIGTERM.
func interrupted(ctx context.Context) bool {
	return errors.Is(ctx.Err(), context.Canceled)
}
