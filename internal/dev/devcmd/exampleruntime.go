package devcmd

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"lull.dev/lull/examples/turnrunner"
)

func init() { subcommands = append(subcommands, newExampleRuntimeCommand) }

func newExampleRuntimeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "example-runtime",
		Short: "Run the reference session runtime (random-length turns through the runtime SDK)",
		Long: `Run lull's reference runtime: it takes turns of random length through the
runtime SDK's gate, drains when its session asks, and journals each turn to
$LULL_JOURNAL. It reads its session and pod from the LULL_* variables lull
sets in every session pod, and its credentials from $KUBECONFIG or the
in-cluster ServiceAccount. In a pod with the injected agent sidecar
($LULL_AGENT_SOCKET set) it holds no credentials and takes its turns
through the agent's HTTP API on that socket instead.

'example-runtime selfcheck' takes no turn: it checks that the container
holds no ServiceAccount token and that the API server refuses a request
without one, one line per check, and exits 0 only if both hold.

Under 'lull dev' every session pod runs this command with its container's
args, which are meant for the real runtime image: flags and arguments it
does not know are ignored (and listed in its log), not an error. (Under
'lull bench', and 'lull dev --runtimes=fleet', the same code runs in the
lull process itself, one goroutine per pod.)`,
		// The runtime parses its own arguments, as it does when it runs
		// in the pod runner's fleet mode.
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return turnrunner.Main(ctx, turnrunner.Process{Args: args, Env: os.Environ(), Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr()})
		},
	}
	// Shown by `lull help example-runtime`; Main parses them.
	cmd.Flags().AddFlagSet(turnrunner.FlagSet(os.Getenv))
	return cmd
}
