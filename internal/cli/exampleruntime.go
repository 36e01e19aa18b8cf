package cli

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"lull.dev/lull/examples/turnrunner"
	"lull.dev/lull/internal/podprocess"
	"lull.dev/lull/runtime"
)

func init() { subcommands = append(subcommands, newExampleRuntimeCommand) }

func newExampleRuntimeCommand() *cobra.Command {
	var opts turnrunner.Options
	cmd := &cobra.Command{
		Use:   "example-runtime",
		Short: "Run the reference session runtime (random-length turns through the runtime SDK)",
		Long: `Run lull's reference runtime: it takes turns of random length through the
runtime SDK's gate, drains when its session asks, and journals each turn to
$LULL_JOURNAL. It reads its session and pod from the LULL_* variables lull
sets in every session pod, and its credentials from $KUBECONFIG or the
in-cluster ServiceAccount.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := runtime.ConfigFromEnv()
			if err != nil {
				return err
			}
			opts.Journal = os.Getenv(podprocess.EnvJournal)
			opts.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return turnrunner.Run(ctx, cfg, opts)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&opts.TurnMin, "turn-min", time.Second, "shortest turn")
	f.DurationVar(&opts.TurnMax, "turn-max", 5*time.Second, "longest turn")
	f.DurationVar(&opts.ThinkMax, "think-max", time.Second, "longest pause between turns")
	return cmd
}
