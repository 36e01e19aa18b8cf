package cli

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"k8s.io/apimachinery/pkg/types"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/examples/turnrunner"
	"lull.dev/lull/internal/podprocess"
	"lull.dev/lull/runtime"
)

func init() { subcommands = append(subcommands, newExampleRuntimeCommand) }

func newExampleRuntimeCommand() *cobra.Command {
	var (
		opts          turnrunner.Options
		reportRefresh time.Duration
	)
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

Under 'lull dev' every session pod runs this command with its container's
args, which are meant for the real runtime image: flags and arguments it
does not know are ignored (and listed in its log), not an error.`,
		// The container's args are written for the real runtime image.
		FParseErrWhitelist: cobra.FParseErrWhitelist{UnknownFlags: true},
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			if ignored := ignoredArgs(cmd.Flags(), rawArgs(cmd.Name())); len(ignored) > 0 {
				log.Info("ignoring arguments meant for another runtime", "args", strings.Join(ignored, " "))
			}
			if err := validateTurns(opts); err != nil {
				return err
			}
			if err := checkReportRefresh(reportRefresh); err != nil {
				return err
			}
			// With the agent sidecar the runtime container has no
			// credentials: it learns who it is from the LULL_* variables
			// and takes turns through the agent's socket.
			socket := os.Getenv(lullv1.EnvAgentSocket)
			var cfg runtime.Config
			if socket != "" {
				cfg = runtime.Config{SessionName: os.Getenv(lullv1.EnvSessionName), SessionNamespace: os.Getenv(lullv1.EnvSessionNamespace),
					PodName: os.Getenv(lullv1.EnvPodName), PodUID: types.UID(os.Getenv(lullv1.EnvPodUID))}
				if cmd.Flags().Changed("report-refresh") {
					log.Info("ignoring --report-refresh: the agent sidecar writes the reports (set its --report-refresh)")
				}
			} else {
				var err error
				if cfg, err = runtime.ConfigFromEnv(); err != nil {
					return err
				}
				cfg.ReportRefresh = reportRefresh
			}
			opts.Journal = os.Getenv(podprocess.EnvJournal)
			opts.Log = log
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return turnrunner.Run(ctx, cfg, socket, opts)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&opts.TurnMin, "turn-min", time.Second, "shortest turn")
	f.DurationVar(&opts.TurnMax, "turn-max", 5*time.Second, "longest turn")
	f.DurationVar(&opts.ThinkMax, "think-max", time.Second, "longest pause between turns")
	f.IntVar(&opts.Turns, "turns", 0, "turns the user takes before leaving the session idle (0: no limit)")
	f.StringVar(&opts.Workspace, "workspace", "", "directory the session keeps across replacements (a claim's mount path): each turn journals which pods wrote there before and adds its own line to turns.log")
	addReportRefreshFlag(f, &reportRefresh,
		"how often the runtime's report is rewritten when nothing changed (1s to 1h); with the agent sidecar, the agent's flag applies")
	return cmd
}

// validateTurns checks the workload's durations before anything starts.
func validateTurns(o turnrunner.Options) error {
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--turn-min", o.TurnMin}, {"--turn-max", o.TurnMax}, {"--think-max", o.ThinkMax}} {
		if d.v < 0 {
			return fmt.Errorf("%s (%s) must not be negative", d.flag, d.v)
		}
	}
	if o.Turns < 0 {
		return fmt.Errorf("--turns (%d) must not be negative; 0 means no limit", o.Turns)
	}
	if o.TurnMin > o.TurnMax {
		return fmt.Errorf("--turn-min (%s) must not be greater than --turn-max (%s)", o.TurnMin, o.TurnMax)
	}
	return nil
}

// rawArgs returns the command line after the subcommand name, as cobra
// parsed it (cobra reads os.Args when no arguments were set).
func rawArgs(name string) []string {
	if i := slices.Index(os.Args, name); i > 0 {
		return os.Args[i+1:]
	}
	return nil
}

// ignoredArgs returns what the flag set fs ignores in args: unknown flags
// (each with the value pflag drops with it, "--flag value") and positional
// arguments, in order.
func ignoredArgs(fs *pflag.FlagSet, args []string) []string {
	var out []string
	// takesValue reports whether a known flag given without "=value"
	// consumes the next argument.
	takesValue := func(f *pflag.Flag, inline bool) bool { return !inline && f.NoOptDefVal == "" }
	// unknown records an unknown flag, and the next argument if pflag
	// takes it as the flag's value.
	unknown := func(i int, inline bool) int {
		a := args[i]
		if !inline && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			i++
			a += " " + args[i]
		}
		out = append(out, a)
		return i
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return append(out, args[i+1:]...)
		case strings.HasPrefix(a, "--"):
			name, _, inline := strings.Cut(a[2:], "=")
			if f := fs.Lookup(name); f != nil {
				if takesValue(f, inline) {
					i++
				}
				continue
			}
			i = unknown(i, inline)
		case strings.HasPrefix(a, "-") && len(a) > 1:
			inline := len(a) > 2 // "-xVALUE", "-x=VALUE" or a group of shorthands
			if f := fs.ShorthandLookup(a[1:2]); f != nil {
				if takesValue(f, inline) {
					i++
				}
				continue
			}
			i = unknown(i, inline)
		default:
			out = append(out, a)
		}
	}
	return out
}
