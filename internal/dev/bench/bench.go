// Package bench measures a Drain rollout on the local control plane, and
// in the same run the floor it is judged against: many sessions whose
// runtimes are idle (so each drains at once), one runtime update, and the
// figures that say what the rollout cost, each beside the API server's
// own floor: time to converge against a raw rollout of as many plain
// StatefulSets and against a plain client doing the protocol's minimal
// sequence for as many sessions, Drained report → delete latency against
// the API server's write→watch latency, the controller's writes per replaced session, its
// work queues, peak memory and CPU, and what idle, current sessions cost
// in API requests afterwards.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/audit"
	"lull.dev/lull/internal/dev/localenv"
	"lull.dev/lull/internal/dev/podprocess"
	"lull.dev/lull/internal/dev/scenario"
	"lull.dev/lull/internal/manager"
)

// Options shape the benchmark.
type Options struct {
	Namespace string
	Sessions  int
	// Timeout bounds each wait: the raw rollout's, the sessions' start,
	// the rollout; zero means DefaultTimeout(Sessions).
	Timeout time.Duration
	// IdleWindow is how long the requests of idle, current sessions are
	// counted after the rollout; at least a second.
	IdleWindow time.Duration
	// WatchWrites is how many sequential writes time the API server's
	// write→watch floor; zero means 200.
	WatchWrites int
	Out         io.Writer
	// Runtimes is how the runtimes ran (the environment's mode); it is
	// printed with the figures.
	Runtimes podprocess.Mode
	// MaxUnavailable is the template's spec.updatePolicy.maxUnavailable;
	// the zero value means DefaultMaxUnavailable.
	MaxUnavailable intstr.IntOrString
}

// DefaultMaxUnavailable is the bench template's maxUnavailable: every
// session drains at once, as the issue's figures ask ("while 1,000
// sessions drain at once") and as the raw rollout it is compared with
// replaces every pod at once. A smaller wave measures the policy's pace,
// not lull's cost.
var DefaultMaxUnavailable = intstr.FromString("100%")

// DefaultTimeout is the limit of each wait for n sessions: 10 minutes, or
// 360 ms per session when that is longer (30 minutes for 5,000), so the
// bench's own limit does not end a run that is only slow.
func DefaultTimeout(n int) time.Duration {
	return max(10*time.Minute, time.Duration(n)*360*time.Millisecond)
}

// Phase is one step of a run and how long it took.
type Phase struct {
	Name string
	Took time.Duration
}

// Result holds the figures of one run.
type Result struct {
	Sessions int
	Runtimes podprocess.Mode
	// MaxUnavailable is the template's maxUnavailable.
	MaxUnavailable intstr.IntOrString
	Replaced       int
	// Converge is from the template update to every session running a pod
	// at its new revision.
	Converge time.Duration
	// Raw is the raw rollout of as many plain StatefulSets, measured
	// before the sessions started.
	Raw RawRollout
	// Protocol is the protocol's minimal sequence for as many sessions
	// done by a plain client, measured after the raw rollout.
	Protocol ProtocolFloor
	// WatchFloor are the API server's write→watch latencies of one object,
	// sorted, measured while the sessions ran idle before the rollout.
	WatchFloor []time.Duration
	// Writes counts the controller's write requests (POST, PUT, PATCH,
	// DELETE) during the rollout by "VERB resource".
	Writes map[string]float64
	// StatusWrites counts session status patches during the rollout by
	// the rollout reason that caused them.
	StatusWrites map[string]float64
	// ReportToDelete are the latencies from the first sight of a matching
	// Drained report to the first sight of the pod's deletion, sorted.
	ReportToDelete []time.Duration
	// QueueDepth is the deepest each controller's work queue was
	// (workqueue_depth, sampled every 500 ms during the rollout), by
	// controller.
	QueueDepth map[string]float64
	// ReconcileTime and QueueWait are the controller's reconcile durations
	// (controller_runtime_reconcile_time_seconds) and the time items
	// waited in its work queues (workqueue_queue_duration_seconds) during
	// the rollout and its settle, by controller.
	ReconcileTime, QueueWait map[string]Histogram
	// PeakRSS is the controller's peak resident set (VmHWM), bytes.
	PeakRSS int64
	// CPU is the controller's user+system CPU time during the rollout.
	CPU time.Duration
	// IdleWindow is how long idle requests were counted; IdleController
	// the controller's requests in it by "VERB resource", IdleRuntimes
	// the runtimes' (fleet mode only, else nil). A watch counts once, as
	// WATCH, when opened.
	IdleWindow                   time.Duration
	IdleController, IdleRuntimes map[string]float64
	Phases                       []Phase
	Violations                   []string
}

// Run measures the floor and one rollout on env.
func Run(ctx context.Context, env *localenv.Env, o Options) (_ Result, err error) {
	defer func() { err = scenario.Interrupted(ctx, err) }()
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout(o.Sessions)
	}
	if o.WatchWrites == 0 {
		o.WatchWrites = 200
	}
	if o.IdleWindow < time.Second {
		return Result{}, fmt.Errorf("idle window %s: want at least 1s", o.IdleWindow)
	}
	out := o.Out
	if o.MaxUnavailable == (intstr.IntOrString{}) {
		o.MaxUnavailable = DefaultMaxUnavailable
	}
	r := Result{Sessions: o.Sessions, Runtimes: o.Runtimes, IdleWindow: o.IdleWindow, MaxUnavailable: o.MaxUnavailable}
	phase := func(name string, since time.Time) { r.Phases = append(r.Phases, Phase{name, time.Since(since)}) }
	c, err := scenario.NewClient(env.Cluster.Config)
	if err != nil {
		return r, err
	}
	cs, err := fastClientset(env.Cluster.Config)
	if err != nil {
		return r, err
	}

	// The raw rollout first, on a cluster that holds nothing else: its
	// pods and lull's never share the node, and it is gone before lull's
	// sessions start.
	start := time.Now()
	if r.Raw, err = measureRawRollout(ctx, cs, o.Namespace+"-floor", o.Sessions, o.Timeout, out); err != nil {
		return r, err
	}
	phase("raw rollout floor", start)

	// The protocol floor with lull's controller stopped (it would
	// reconcile the floor's Sessions), started again once the floor's
	// namespace is gone: its figures are of a process that saw none of it.
	start = time.Now()
	env.KillController()
	r.Protocol, err = measureProtocolFloor(ctx, env.Cluster.Config, cs, o.Namespace+"-protocol", o.Sessions, o.Timeout, out)
	// Started again whatever the floor's outcome: the environment may
	// outlive this run (a test's, shared by others).
	if serr := env.StartController(context.WithoutCancel(ctx)); serr != nil && err == nil {
		err = serr
	}
	if err != nil {
		return r, err
	}
	phase("protocol floor", start)

	auditor, err := audit.Start(ctx, env.Cluster.EtcdURL)
	if err != nil {
		return r, err
	}
	viewCtx, stopView := context.WithCancel(ctx)
	defer stopView()
	view, err := watchNamespace(viewCtx, env.Cluster.Config, o.Namespace)
	if err != nil {
		return r, err
	}
	// One turn of zero length as the runtime starts, then none: an idle
	// runtime, which drains as soon as it is asked, and an idle session
	// once it runs its new pod (turns would be activity the runtime must
	// report, not the idle cost the last phase measures).
	tmpl := scenario.Template(o.Namespace, "bench", "example.com/lull/turnrunner:v1", "--turn-min=0s", "--turn-max=0s", "--think-max=1s", "--turns=1")
	tmpl.Spec.UpdatePolicy.MaxUnavailable = &o.MaxUnavailable
	start = time.Now()
	names, err := launch(ctx, c, tmpl, o.Sessions)
	if err != nil {
		return r, err
	}
	before, err := scenario.WaitFor(ctx, view, o.Namespace, names, time.Second, o.Timeout, progress(out, "starting", start, nil), scenario.Converged)
	if errors.Is(err, scenario.ErrInterrupted) {
		return r, fmt.Errorf("start of the sessions %w", err)
	} else if err != nil {
		return r, fmt.Errorf("sessions did not start: %w", err)
	}
	if err := waitReported(ctx, view, o.Namespace, names, before, o.Timeout); err != nil {
		return r, err
	}
	// The controller finishes the sessions' start (their status) before
	// anything is timed: its writes would load the API server under the
	// floor and be counted as the rollout's.
	if err := waitQuiet(ctx, env.MetricsURL(), quietFor, o.Timeout); err != nil {
		return r, fmt.Errorf("after the start of the sessions: %w", err)
	}
	fmt.Fprintf(out, "%d sessions running, every runtime connected, the controller quiet (%s)\n", o.Sessions, time.Since(start).Round(time.Second))
	phase("start of sessions", start)

	start = time.Now()
	if r.WatchFloor, err = watchFloor(ctx, cs, o.Namespace, o.WatchWrites); err != nil {
		return r, err
	}
	phase("write→watch floor", start)

	pid := env.ControllerPID()
	m0, err := scrapeMetrics(env.MetricsURL())
	if err != nil {
		return r, err
	}
	cpu0, err := cpuTime(pid)
	if err != nil {
		return r, err
	}
	depth := sampleQueueDepth(env.MetricsURL(), 500*time.Millisecond)
	start = time.Now()
	if err := scenario.SetImage(ctx, c, o.Namespace, "bench", "example.com/lull/turnrunner:v2"); err != nil {
		depth.stop()
		return r, err
	}
	after, err := scenario.WaitFor(ctx, view, o.Namespace, names, 250*time.Millisecond, o.Timeout, progress(out, "rolling out", start, &before), scenario.MovedFrom(before))
	r.Converge = time.Since(start)
	r.QueueDepth = depth.stop()
	if errors.Is(err, scenario.ErrInterrupted) {
		return r, fmt.Errorf("rollout %w", err)
	} else if err != nil {
		return r, fmt.Errorf("rollout did not converge: %w", err)
	}
	phase("rollout", start)
	// The last writes (the status of each new pod once its runtime has
	// reported) are part of the rollout's cost, and must not be counted
	// as the cost of idle sessions: wait for every new runtime's report,
	// then for the controller to be quiet.
	start = time.Now()
	if err := waitReported(ctx, view, o.Namespace, names, after, o.Timeout); err != nil {
		return r, fmt.Errorf("after the rollout: %w", err)
	}
	if err := waitQuiet(ctx, env.MetricsURL(), quietFor, o.Timeout); err != nil {
		return r, fmt.Errorf("after the rollout: %w", err)
	}
	phase("settle", start)
	m1, err := scrapeMetrics(env.MetricsURL())
	if err != nil {
		return r, err
	}
	cpu1, err := cpuTime(pid)
	if err != nil {
		return r, err
	}
	r.CPU = cpu1 - cpu0
	r.Writes = delta(writes(m1), writes(m0))
	r.StatusWrites = delta(m1.Sum("lull_session_status_writes_total", "reason"), m0.Sum("lull_session_status_writes_total", "reason"))
	r.ReconcileTime = histogramDelta(m1, m0, "controller_runtime_reconcile_time_seconds", "controller")
	r.QueueWait = histogramDelta(m1, m0, "workqueue_queue_duration_seconds", "controller")
	if r.PeakRSS, err = peakRSS(pid); err != nil {
		return r, err
	}
	rep, err := auditor.Check(env.Runner.JournalDir(), o.Namespace)
	if err != nil {
		return r, err
	}
	r.Violations = rep.Violations
	for _, d := range rep.Deletions {
		r.Replaced++
		if d.Drained {
			r.ReportToDelete = append(r.ReportToDelete, d.At.Sub(d.DrainedAt))
		}
	}
	sort.Slice(r.ReportToDelete, func(i, j int) bool { return r.ReportToDelete[i] < r.ReportToDelete[j] })

	start = time.Now()
	fmt.Fprintf(out, "counting the requests of %d idle, current sessions for %s\n", o.Sessions, o.IdleWindow)
	if r.IdleController, r.IdleRuntimes, err = idleRequests(ctx, env, o.IdleWindow); err != nil {
		return r, err
	}
	phase("idle window", start)
	return r, nil
}

// launch is scenario.Launch with the sessions created by rawWorkers at
// once: one by one, 1,000 creates took most of a minute on a loaded API
// server.
func launch(ctx context.Context, c client.Client, t *lullv1.SessionTemplate, n int) ([]string, error) {
	if err := scenario.EnsureNamespace(ctx, c, t.Namespace); err != nil {
		return nil, err
	}
	if err := c.Create(ctx, t); err != nil {
		return nil, fmt.Errorf("create SessionTemplate %s: %w", t.Name, err)
	}
	names := make([]string, n)
	err := forEach(ctx, n, func(i int) error {
		names[i] = fmt.Sprintf("b-%d", i)
		s := &lullv1.Session{
			ObjectMeta: metav1.ObjectMeta{Namespace: t.Namespace, Name: names[i]},
			Spec:       lullv1.SessionSpec{TemplateRef: lullv1.TemplateReference{Name: t.Name}},
		}
		if err := c.Create(ctx, s); err != nil {
			return fmt.Errorf("create session %s: %w", names[i], err)
		}
		return nil
	})
	return names, err
}

// quietFor is how long the controller must have written nothing before a
// rollout counts as settled: twice session.SettleDelay, after which a
// passing state is written.
const quietFor = 10 * time.Second

// idleRequests counts the controller's and the fleet runtimes' API
// requests during window.
func idleRequests(ctx context.Context, env *localenv.Env, window time.Duration) (ctrl, runtimes map[string]float64, err error) {
	m0, err := scrapeMetrics(env.MetricsURL())
	if err != nil {
		return nil, nil, err
	}
	rt0 := env.Runner.RuntimeRequests()
	if err := scenario.Sleep(ctx, window); err != nil {
		return nil, nil, err
	}
	m1, err := scrapeMetrics(env.MetricsURL())
	if err != nil {
		return nil, nil, err
	}
	ctrl = delta(requests(m1, nil), requests(m0, nil))
	if rt1 := env.Runner.RuntimeRequests(); rt1 != nil {
		runtimes = map[string]float64{}
		for k, v := range rt1 {
			if d := v - rt0[k]; d > 0 {
				runtimes[k] = float64(d)
			}
		}
	}
	return ctrl, runtimes, nil
}

// fastClientset is a clientset for the floor: a client limited only by the
// API server.
func fastClientset(cfg *rest.Config) (kubernetes.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 5000, 5000
	return kubernetes.NewForConfig(cfg)
}

// watchNamespace returns a cache of the Sessions, StatefulSets and pods of
// ns, kept by watches: the fleet is observed every 250 ms, and lists of
// thousands of objects at that pace would load the API server whose
// rollout is being timed (the raw rollout is observed the same way).
func watchNamespace(ctx context.Context, cfg *rest.Config, ns string) (client.Reader, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 200, 400
	c, err := cache.New(cfg, cache.Options{Scheme: manager.Scheme(), DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		return nil, err
	}
	go func() { _ = c.Start(ctx) }()
	for _, obj := range []client.Object{&lullv1.Session{}, &appsv1.StatefulSet{}, &corev1.Pod{}} {
		if _, err := c.GetInformer(ctx, obj); err != nil {
			return nil, fmt.Errorf("watch %T in %s: %w", obj, ns, err)
		}
	}
	if !c.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("watch %s: caches not synced: %w", ns, ctx.Err())
	}
	return c, nil
}

// waitReported waits until every session's runtime has reported for its
// current pod, its one turn written (settledReport): the runtimes are
// connected and watching, and have nothing left to write.
func waitReported(ctx context.Context, c client.Reader, ns string, names []string, f scenario.Fleet, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var list lullv1.SessionList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		ready := 0
		for _, s := range list.Items {
			if settledReport(s.Status.Runtime, f.Pods[s.Name].UID) {
				ready++
			}
		}
		if ready == len(names) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d runtimes reported their turn within %s", ready, len(names), timeout)
		}
		if err := scenario.Sleep(ctx, time.Second); err != nil {
			return fmt.Errorf("%w with %d of %d runtimes reported", err, ready, len(names))
		}
	}
}

// settledReport reports whether r is pod's runtime's report after the
// bench's one turn: idle, with that turn's activity. The runtime writes a
// change of activity alone up to its report refresh (60 s) late; until it
// has, that write is still to come, and belongs to the session's start,
// not to what comes next (the floor, the rollout, the idle window).
func settledReport(r *lullv1.RuntimeReport, pod string) bool {
	return r != nil && string(r.PodUID) == pod && r.ActiveTurns == 0 && r.LastActivity != nil
}

func progress(out io.Writer, what string, start time.Time, before *scenario.Fleet) func(scenario.Fleet) {
	last := ""
	return func(f scenario.Fleet) {
		n := f.Current
		if before != nil {
			n = 0
			for name, p := range f.Pods {
				if p.Revision != before.Pods[name].Revision {
					n++
				}
			}
		}
		line := fmt.Sprintf("%s: %d/%d done, %d draining", what, n, f.Sessions, f.Draining)
		if line != last {
			fmt.Fprintf(out, "%7.1fs %s\n", time.Since(start).Seconds(), line)
			last = line
		}
	}
}
