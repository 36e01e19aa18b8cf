// Package runtimesdk is lull's SDK for session runtimes written in Go. A
// runtime holds interactive work in "turns"; lull replaces the runtime's
// pod only between turns.
//
// A Runtime admits turns through its Gate, watches its own Session for a
// drain request naming its pod, and reports its drain state in the
// Session's status.runtime. Once drained it is sealed: it accepts no turn
// until the request is withdrawn and it has published Serving again, which
// is what makes it safe for the controller to delete the pod on a Drained
// report. This follows the Kelos session-runtime drain.
//
// The report is written only when what it says changes: a new drain state
// at once, turn counts and activity coalesced so that none stays unwritten
// longer than Config.ReportRefresh. An idle runtime makes no API request
// after its first report, save one watch request every 30 to 60 minutes
// (the watch resumes from its last version, with bookmarks, and never
// reads again unless that version has expired). A turn attempted while the
// session is being drained for inactivity (reason Idle) is refused but
// counts as activity, and is reported at once: the controller then
// withdraws the request and the runtime serves again.
//
//	rt, err := runtimesdk.New(cfg) // cfg from runtimesdk.ConfigFromEnv()
//	go rt.Run(ctx)
//	...
//	turn, err := rt.BeginTurn(runtimesdk.TurnOptions{})
//	if errors.Is(err, runtime.ErrDraining) {
//		// tell the client to reconnect and retry
//	}
//	defer turn.End()
//
// A process that holds turns for others and may restart while they go on
// (`lull agent`) persists each turn's Turn.Record and, when it starts
// again, hands the records to Restore before Run, so its first report
// already counts them.
//
// The runtime's identity may only get and watch its Session and patch its
// sessions/status, and the runtime needs nothing more: it never lists.
package runtimesdk

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"
)

// Runtime is the drain side of one session runtime: its turn gate, the
// watch on its Session and the reporter of its state.
type Runtime struct {
	cfg      Config
	gate     *Gate
	api      sessionAPI
	log      *slog.Logger
	reporter *reporter
	running  atomic.Bool
}

// New returns a Runtime for cfg. It does not contact the API server; Run
// does. Its gate refuses turns until Run has published Serving.
func New(cfg Config) (*Runtime, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c, err := newKubeClient(cfg.REST)
	if err != nil {
		return nil, err
	}
	key := types.NamespacedName{Namespace: cfg.SessionNamespace, Name: cfg.SessionName}
	return newRuntime(cfg, &kubeSession{c: c, key: key}), nil
}

func newRuntime(cfg Config, api sessionAPI) *Runtime {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("session", cfg.SessionNamespace+"/"+cfg.SessionName, "pod", cfg.PodName, "podUID", cfg.PodUID)
	gate := NewGate()
	refresh, refreshSeconds := cfg.reportRefresh()
	return &Runtime{
		cfg: cfg, gate: gate, api: api, log: log,
		reporter: newReporter(api, gate, cfg.PodUID, refresh, refreshSeconds, log),
	}
}

// Run reads the Session, applies its drain request, then reports the
// runtime's state and follows the Session until ctx is done, retrying
// failed API calls with backoff. The first report is Serving (or the drain
// state, if a request for this pod is already outstanding), and the gate
// opens once Serving is published. Run returns nil when ctx is done; it
// returns an error only if called more than once.
func (r *Runtime) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("runtime: Run may be called only once")
	}
	// The drain request is applied before the first report, so a runtime
	// restarted in a pod being drained does not first report Serving.
	s := r.getSession(ctx, newReadBackoff())
	if s == nil {
		return nil
	}
	r.apply(s)
	r.log.Info("runtime started", "drainRequest", r.gate.Snapshot().RequestID)
	var wg sync.WaitGroup
	wg.Go(func() { r.reporter.run(ctx) })
	r.watch(ctx, s)
	wg.Wait()
	return nil
}

// BeginTurn admits a turn; see Gate.BeginTurn.
func (r *Runtime) BeginTurn(opts TurnOptions) (*Turn, error) { return r.gate.BeginTurn(opts) }

// Restore makes recorded turns active before Run; see Gate.Restore.
func (r *Runtime) Restore(records []TurnRecord) ([]*Turn, error) { return r.gate.Restore(records) }

// Bump records activity that is not a turn; see Gate.Bump.
func (r *Runtime) Bump() { r.gate.Bump() }

// Snapshot returns the gate's current state; see Gate.Snapshot.
func (r *Runtime) Snapshot() Snapshot { return r.gate.Snapshot() }

// Subscribe streams the gate's snapshots; see Gate.Subscribe.
func (r *Runtime) Subscribe() (snapshots <-chan Snapshot, cancel func()) { return r.gate.Subscribe() }
