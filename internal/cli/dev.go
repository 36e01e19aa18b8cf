package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"lull.dev/lull/internal/demo"
	"lull.dev/lull/internal/localenv"
)

func init() { subcommands = append(subcommands, newDevCommand) }

func newDevCommand() *cobra.Command {
	var (
		stateDir string
		runDemo  bool
		keep     bool
		d        = demo.Defaults()
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

Ctrl-C stops every process lull dev started. The binaries come from
'make tools' (hack/build-tools.sh).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			out := cmd.OutOrStdout()
			env, err := localenv.Up(ctx, localenv.Options{StateDir: stateDir, Progress: out})
			if err != nil {
				return err
			}
			defer func() {
				fmt.Fprintln(out, "stopping the local control plane")
				_ = env.Down()
			}()
			fmt.Fprintf(out, "\nlocal control plane ready; state and logs in %s\n  export KUBECONFIG=%s\n", env.Cluster.StateDir, env.Cluster.Kubeconfig)
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
			return context.Cause(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&stateDir, "state-dir", "", "directory for certificates, kubeconfig, logs and etcd data (default: a new temp dir)")
	f.BoolVar(&runDemo, "demo", false, "run the rollout demo and print a summary")
	f.BoolVar(&keep, "keep", false, "with --demo, keep the cluster running after the summary")
	f.IntVar(&d.Sessions, "sessions", d.Sessions, "demo: number of sessions")
	f.DurationVar(&d.TurnMin, "turn-min", d.TurnMin, "demo: shortest turn")
	f.DurationVar(&d.TurnMax, "turn-max", d.TurnMax, "demo: longest turn")
	return cmd
}
