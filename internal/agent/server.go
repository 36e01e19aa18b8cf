// Package agent is the lull agent, the drain sidecar (`lull-agent`, the
// entrypoint of its image, and `lull agent`, the same command in the dev
// binary; NewCommand builds both): it runs the runtime SDK for a session
// runtime written in any language and serves it a small JSON API on
// loopback or a unix socket, versioned under /v1:
//
//	POST   /v1/turns              begin a turn, body optional {"lease":"30s"}:
//	                              201 {"id":"t-…","leaseExpiresAt":…};
//	                              503 {"error":"draining",…} + Retry-After
//	                              (during an Idle drain the attempt counts
//	                              as activity and wakes the session);
//	                              500 {"error":"state_file",…}: not begun
//	DELETE /v1/turns/{id}         end a turn: 204, 404 if unknown or expired,
//	                              500 {"error":"state_file",…}: not ended, retry
//	POST   /v1/turns/{id}/renew   renew a turn's lease: 200 with the new expiry
//	                              (also for a lapsed turn in its grace)
//	GET    /v1/drain              the drain state (runtimesdk.Snapshot), with
//	                              activeTurns, lapsedTurns and expiredTurns
//	GET    /v1/drain/stream       the drain state as Server-Sent Events
//	POST   /v1/activity           record activity that is not a turn: 204
//	GET    /healthz               liveness: 200, records no activity
//
// Only a begun (or, during an Idle drain, attempted) or ended turn and
// POST /v1/activity are activity; reads of the drain state, streams and
// health checks never are, so a probe or a dashboard cannot keep an idle
// session from being culled.
//
// The agent keeps its turns in a state file (see Open) as well as in
// memory, so that when its container restarts while the runtime's goes on,
// it starts again with the runtime's turns and does not report Drained
// under them. Turn IDs survive the restart.
//
// The API has no authentication: whoever reaches it can hold a drain open.
// That is why it listens only on loopback or a unix socket.
//
// The package links only the runtime SDK, the API and the version
// (TestProductionBinariesLinkOnlyTheirOwn in internal/dev).
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"lull.dev/lull/runtimesdk"
)

// DefaultListen is the address the agent listens on by default.
const DefaultListen = "127.0.0.1:8377"

// shutdownTimeout bounds a graceful stop of the HTTP server.
const shutdownTimeout = 5 * time.Second

// Gate is the part of the runtime SDK the agent serves; *runtimesdk.Runtime
// and *runtimesdk.Gate have it.
type Gate interface {
	BeginTurn(runtimesdk.TurnOptions) (*runtimesdk.Turn, error)
	Restore([]runtimesdk.TurnRecord) ([]*runtimesdk.Turn, error)
	Bump()
	Snapshot() runtimesdk.Snapshot
	Subscribe() (snapshots <-chan runtimesdk.Snapshot, cancel func())
}

// Server serves the agent API over a Gate. It is an http.Handler.
type Server struct {
	gate      Gate
	log       *slog.Logger
	handler   http.Handler
	stateFile string
	pod       types.UID

	// mu guards turns and the writes of the state file.
	mu    sync.Mutex
	turns map[string]*runtimesdk.Turn // by ID; holds only turns begun here or restored

	stopExpiries func()
}

// Open returns a Server for g, the gate of the runtime of the pod with UID
// pod, that keeps the turns begun through it in the state file at
// stateFile (see DefaultStateFile). It first restores into g the turns the
// file records, so it must be called before the runtime's first report
// (before Run). It returns an error, and the agent must not start, when the
// file exists but cannot be used or cannot be written; the error names the
// file and the way out. log nil means slog.Default().
func Open(g Gate, stateFile string, pod types.UID, log *slog.Logger) (*Server, error) {
	if stateFile == "" {
		return nil, errors.New("agent state file: the path is empty")
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Server{gate: g, log: log, stateFile: stateFile, pod: pod, turns: make(map[string]*runtimesdk.Turn)}
	s.handler = s.routes()
	if err := s.restore(); err != nil {
		return nil, err
	}
	snapshots, cancel := g.Subscribe()
	s.stopExpiries = cancel
	go s.recordExpiries(snapshots)
	return s, nil
}

// Close stops recording expiries in the state file. Serve does not need it;
// call it when the Server is done with.
func (s *Server) Close() { s.stopExpiries() }

// recordExpiries writes the state file each time the gate counts a turn as
// expired (its lease and grace ran out), so an agent restarted later does not
// restore a turn that is over: that would hold the next drain for another
// lease and count the turn as expired twice. The write follows the expiry by
// the time the snapshot takes to arrive; a restart inside that moment still
// restores the turn, which errs towards holding a drain longer.
func (s *Server) recordExpiries(snapshots <-chan runtimesdk.Snapshot) {
	last := int64(-1)
	for snap := range snapshots {
		if last >= 0 && snap.ExpiredTurns != last {
			s.saveTurns("", "expire")
		}
		last = snap.ExpiredTurns
	}
}

// ServeHTTP serves the agent API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Serve serves the API on ln until ctx is done, then stops gracefully
// (open drain streams end with ctx) and closes ln. It returns nil after a
// stop caused by ctx.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 5 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	stopped := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(stopped)
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			s.log.Warn("agent API did not stop in time", "err", err)
		}
	})
	s.log.Info("agent API listening", "addr", ln.Addr().String())
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		<-stopped
		return nil
	}
	stop()
	return err
}

// Options configure `lull agent`.
type Options struct {
	// Listen is the API's address; see Listen.
	Listen string
	// StateFile is where the agent keeps its turns; see Open.
	StateFile string
	// SocketMode is the permission of a unix socket; zero means 0660. The
	// injected sidecar uses 0666: its socket directory is an emptyDir only
	// the pod's runtime container shares, and that container may run as
	// any user.
	SocketMode os.FileMode
	// ReportRefresh, when not zero, replaces the environment's
	// LULL_REPORT_REFRESH: see runtimesdk.Config.ReportRefresh.
	ReportRefresh time.Duration
	// Log receives the agent's logs; nil means slog.Default().
	Log *slog.Logger
}

// Run is `lull agent`: it reads the runtime Config from the environment
// (runtimesdk.ConfigFromEnv), restores the turns of the state file (see Open),
// listens on o.Listen, and runs the runtime and the API until ctx is done or
// either fails.
func Run(ctx context.Context, o Options) error {
	cfg, err := runtimeConfig(os.Getenv, o)
	if err != nil {
		return err
	}
	rt, err := runtimesdk.New(cfg)
	if err != nil {
		return err
	}
	// Before rt.Run: its first report must count the restored turns.
	srv, err := Open(rt, o.StateFile, cfg.PodUID, o.Log)
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := ListenMode(o.Listen, o.SocketMode)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- rt.Run(ctx) }()
	err = srv.Serve(ctx, ln)
	cancel()
	return errors.Join(err, <-ran)
}

// Listen listens on addr: "unix:///path/agent.sock" for a unix socket, or
// host:port where host is a loopback address or "localhost". Anything else
// is refused: the API is unauthenticated. A stale socket file left by an
// earlier agent is replaced; a socket another process still serves is not.
// The socket is made readable and writable by owner and group (0660).
func Listen(addr string) (net.Listener, error) { return ListenMode(addr, 0) }

// ListenMode is Listen with the unix socket's permission given; zero means
// 0660.
func ListenMode(addr string, mode os.FileMode) (net.Listener, error) {
	if mode == 0 {
		mode = 0o660
	}
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		return listenUnix(path, mode)
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: want host:port on loopback or unix:///path: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("listen address %q: the agent API is unauthenticated, so it listens only on loopback (127.0.0.1, ::1, localhost) or a unix socket", addr)
	}
	return net.Listen("tcp", addr)
}

func listenUnix(path string, mode os.FileMode) (net.Listener, error) {
	if path == "" {
		return nil, errors.New("listen address unix://: want unix:///path/agent.sock")
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("listen on %s: another process serves this socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket: %w", err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("socket permissions: %w", err)
	}
	return ln, nil
}

// runtimeConfig returns the runtime Config the agent reports with: the
// environment's (runtimesdk.ConfigFrom getenv), with o's logger and report
// refresh, and with OmitStart set. The agent's reports speak for a runtime
// in another container, whose process start it does not know; its own
// start would tell the controller nothing of the runtime container's
// termination, so its reports carry no startedAt, and the controller
// orders them by their write time (docs/protocol.md).
func runtimeConfig(getenv func(string) string, o Options) (runtimesdk.Config, error) {
	cfg, err := runtimesdk.ConfigFrom(getenv)
	if err != nil {
		return runtimesdk.Config{}, err
	}
	cfg.Logger = o.Log
	if o.ReportRefresh != 0 {
		cfg.ReportRefresh = o.ReportRefresh
	}
	cfg.OmitStart = true
	return cfg, nil
}
