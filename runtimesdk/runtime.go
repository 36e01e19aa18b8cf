package runtimesdk

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Runtime is the drain side of one session runtime: its turn gate, the
// watch on its Session and the reporter of its state.
type Runtime struct {
	cfg      Config
	gate     *Gate
	api      sessionAPI
	log      *slog.Logger
	clock    clock.WithDelayedExecution
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
	clk := cfg.clock()
	gate := newGate(clk)
	refresh, refreshSeconds := cfg.reportRefresh()
	rep := newReporter(api, gate, cfg.PodUID, refresh, refreshSeconds, log, clk)
	if !cfg.OmitStart {
		// Taken before Run can write any report: this process is alive, so
		// its start is after the container's previous termination.
		started := metav1.NewTime(clk.Now().Truncate(time.Second))
		rep.started = &started
	}
	return &Runtime{cfg: cfg, gate: gate, api: api, log: log, clock: clk, reporter: rep}
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
