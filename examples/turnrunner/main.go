package turnrunner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/podprocess"
	"lull.dev/lull/runtimesdk"
)

// Process is what a host process hands its main: its arguments, its
// environment and its output. Main reads nothing else of the process it
// runs in, so many runtimes can run in one process, each with its own.
type Process struct {
	// Args are the command-line arguments after the command's name.
	Args []string
	// Env is the environment, "KEY=value" entries as os.Environ returns
	// them; a later entry of a key wins.
	Env []string
	// Stdout receives --help; Stderr the runtime's log. Nil discards.
	Stdout, Stderr io.Writer
	// Transport, when set, carries the runtime's requests to the API
	// server in place of a connection pool of its own (the kubeconfig's TLS
	// settings are then the transport's business); the runtime's own token
	// still authenticates every request. A fleet of runtimes in one process
	// shares one this way.
	Transport http.RoundTripper
}

// Main is `lull example-runtime`: it parses p.Args, reads its session, pod
// and credentials from p.Env (the LULL_* variables lull sets in a session
// pod, KUBECONFIG, LULL_JOURNAL, LULL_AGENT_SOCKET) and takes turns with
// Run until ctx is done. Flags it does not know are logged and ignored (a
// container's args are written for the real runtime image). It returns nil
// once ctx is done, or for --help; an error for a bad flag or environment,
// or when the runtime stops on its own — what a host process turns into
// its exit status.
//
// With SelfCheckCommand as its first argument it takes no turn: it
// checks that the container holds no ServiceAccount token and that the
// API server refuses a request without one, prints a line per check to
// p.Stdout, and returns an error unless all hold.
func Main(ctx context.Context, p Process) error {
	stdout, stderr := orDiscard(p.Stdout), orDiscard(p.Stderr)
	getenv := lookup(p.Env)
	if len(p.Args) > 0 && p.Args[0] == SelfCheckCommand {
		return selfCheck(ctx, p.Args[1:], getenv, stdout)
	}
	var (
		opts          Options
		reportRefresh time.Duration
	)
	fs := flagSet(&opts, &reportRefresh, getenv)
	if err := fs.Parse(p.Args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil
		}
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if ignored := ignoredArgs(fs, p.Args); len(ignored) > 0 {
		log.Info("ignoring arguments meant for another runtime", "args", strings.Join(ignored, " "))
	}
	if err := validate(opts, reportRefresh); err != nil {
		return err
	}
	// With the agent sidecar the runtime container has no credentials: it
	// learns who it is from the LULL_* variables and takes turns through
	// the agent's socket.
	socket := getenv(lullv1.EnvAgentSocket)
	var cfg runtimesdk.Config
	if socket != "" {
		cfg = runtimesdk.Config{SessionName: getenv(lullv1.EnvSessionName), SessionNamespace: getenv(lullv1.EnvSessionNamespace),
			PodName: getenv(lullv1.EnvPodName), PodUID: types.UID(getenv(lullv1.EnvPodUID))}
		if fs.Changed("report-refresh") {
			log.Info("ignoring --report-refresh: the agent sidecar writes the reports (set its --report-refresh)")
		}
	} else {
		var err error
		if cfg, err = runtimesdk.ConfigFrom(getenv); err != nil {
			return err
		}
		cfg.ReportRefresh = reportRefresh
		cfg.Logger = log
		if p.Transport != nil {
			cfg.REST = withTransport(cfg.REST, p.Transport)
		}
	}
	opts.Journal = getenv(podprocess.EnvJournal)
	opts.Log = log
	return Run(ctx, cfg, socket, opts)
}

// FlagSet returns the flags Main takes, with the defaults it would give
// them in the environment getenv reads, for a command's help.
func FlagSet(getenv func(string) string) *pflag.FlagSet {
	var (
		opts Options
		d    time.Duration
	)
	return flagSet(&opts, &d, getenv)
}

// flagSet binds Main's flags to opts and reportRefresh. --report-refresh
// defaults to LULL_REPORT_REFRESH (read through getenv) when that is a
// duration within bounds; a bad one is left for runtimesdk.ConfigFrom to name.
func flagSet(opts *Options, reportRefresh *time.Duration, getenv func(string) string) *pflag.FlagSet {
	fs := pflag.NewFlagSet("example-runtime", pflag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned, not printed
	// The container's args are written for the real runtime image.
	fs.ParseErrorsAllowlist.UnknownFlags = true
	fs.DurationVar(&opts.TurnMin, "turn-min", time.Second, "shortest turn")
	fs.DurationVar(&opts.TurnMax, "turn-max", 5*time.Second, "longest turn")
	fs.DurationVar(&opts.ThinkMax, "think-max", time.Second, "longest pause between turns")
	fs.IntVar(&opts.Turns, "turns", 0, "turns the user takes before leaving the session idle (0: no limit)")
	fs.StringVar(&opts.Workspace, "workspace", "", "directory the session keeps across replacements (a claim's mount path): each turn journals which pods wrote there before and adds its own line to turns.log")
	def := runtimesdk.DefaultReportRefresh
	if d, err := time.ParseDuration(getenv(runtimesdk.EnvReportRefresh)); err == nil && runtimesdk.CheckReportRefresh(d) == nil {
		def = d
	}
	fs.DurationVar(reportRefresh, "report-refresh", def,
		"the longest a change of the runtime's turns or activity stays unwritten in its report (1s to 1h); with the agent sidecar, the agent's flag applies; default from "+runtimesdk.EnvReportRefresh)
	return fs
}

// validate checks the workload's durations before anything starts.
func validate(o Options, reportRefresh time.Duration) error {
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
	if err := runtimesdk.CheckReportRefresh(reportRefresh); err != nil {
		return fmt.Errorf("--report-refresh: %w", err)
	}
	return nil
}

// withTransport returns a copy of cfg whose requests go through t: the
// TLS settings are dropped (client-go refuses them beside a custom
// transport; t carries its own), the token stays.
func withTransport(cfg *rest.Config, t http.RoundTripper) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.TLSClientConfig = rest.TLSClientConfig{}
	cfg.Transport = t
	return cfg
}

// lookup returns a getenv over env, "KEY=value" entries; the last entry of
// a key wins, as with os.Getenv.
func lookup(env []string) func(string) string {
	m := make(map[string]string, len(env))
	for _, e := range env {
		if k, v, ok := strings.Cut(e, "="); ok {
			m[k] = v
		}
	}
	return func(k string) string { return m[k] }
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
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
