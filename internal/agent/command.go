package agent

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"lull.dev/lull/internal/version"
)

// NewCommand returns the lull agent's command, named use ("agent" inside
// the dev binary, "lull-agent" as its own binary).
func NewCommand(use string) *cobra.Command {
	var (
		listen, stateFile, socketMode string
		reportRefresh                 time.Duration
	)
	cmd := &cobra.Command{
		Use:          use,
		Short:        "Run the lull agent, the drain sidecar that serves a session runtime's turn gate over local HTTP",
		Version:      version.String(),
		SilenceUsage: true,
		Long: `Run the lull agent, the drain sidecar of a session runtime.

The agent watches the session for drain requests for its pod, reports the
runtime's drain state in the session's status, and serves the runtime a
JSON API on loopback or a unix socket:

  POST   /v1/turns              begin a turn; body optional {"lease":"30s"}
                                (503 with Retry-After while draining)
  DELETE /v1/turns/{id}         end a turn
  POST   /v1/turns/{id}/renew   renew a turn's lease
  GET    /v1/drain              drain state
  GET    /v1/drain/stream       drain state as Server-Sent Events
  POST   /v1/activity           record activity that is not a turn
  GET    /healthz               liveness (records no activity)

The agent keeps the turns begun through it in a state file, written before
each answer, so that when its container restarts while the runtime's goes
on, it starts again with the runtime's turns instead of reporting Drained
under them. Put the file on an emptyDir volume mounted into the agent's
container (by default at /var/run/lull): an emptyDir outlives a container
restart but not the pod. If the file exists but cannot be read, the agent
does not start; the error says how to recover.

The agent writes the runtime's report only when it changes: a new drain
state at once, turn counts and activity at most once per --report-refresh
(the longest a change stays unwritten, and the granularity of activity the
idle policy sees). An idle agent makes no API request after its first
report but one watch request every 30 to 60 minutes. Only turns (begun,
ended, or attempted while the session is being drained for inactivity)
and POST /v1/activity count as activity; reads, streams and health checks
never do.

It reads LULL_SESSION_NAME, LULL_SESSION_NAMESPACE, LULL_POD_NAME and
LULL_POD_UID, which lull sets in a session pod, and reaches the API server
through KUBECONFIG if set, else the pod's service account.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			mode, err := strconv.ParseUint(socketMode, 8, 32)
			if err != nil || mode > 0o777 {
				return fmt.Errorf("--socket-mode %q: want an octal permission such as 0660", socketMode)
			}
			if err := checkReportRefresh(reportRefresh); err != nil {
				return err
			}
			return Run(ctx, Options{Listen: listen, StateFile: stateFile, SocketMode: os.FileMode(mode),
				ReportRefresh: reportRefresh, Log: log})
		},
	}
	cmd.Flags().StringVar(&listen, "listen", DefaultListen,
		"address of the agent API: host:port on loopback, or unix:///path/agent.sock")
	cmd.Flags().StringVar(&socketMode, "socket-mode", "0660",
		"permission of the unix socket, in octal; 0666 when only the pod's runtime container shares its directory and may run as another user")
	defaultStateFile := DefaultStateFile
	if v := os.Getenv(EnvStateFile); v != "" {
		defaultStateFile = v
	}
	cmd.Flags().StringVar(&stateFile, "state-file", defaultStateFile,
		"file the agent keeps its turns in, on a volume that outlives the agent's container (an emptyDir); default from "+EnvStateFile)
	addReportRefreshFlag(cmd.Flags(), &reportRefresh,
		"the longest a change of the runtime's turns or activity stays unwritten in its report (1s to 1h); nothing is written while nothing changes")
	return cmd
}
