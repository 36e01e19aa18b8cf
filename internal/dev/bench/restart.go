package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/localenv"
	"lull.dev/lull/internal/dev/podprocess"
	"lull.dev/lull/internal/dev/scenario"
)

// RestartOptions shape the restart benchmark (RunRestart).
type RestartOptions struct {
	Namespace string
	Sessions  int
	// MidDrain is how many sessions have a drain request outstanding when
	// the controller is killed: the template's maxUnavailable. 0 means
	// 20% of Sessions, at least 1.
	MidDrain int
	// Quiet is how long the controller must write nothing to count as
	// quiet: before the kill (every status written), and after the
	// restart to end the measurement. It must be longer than
	// session.SettleDelay (5 s), after which a passing state is written.
	// 0 means 10 s.
	Quiet time.Duration
	// Window bounds the measurement after the restart. 0 means 2 minutes.
	Window time.Duration
	// Timeout bounds the sessions' start and the drain requests' issue.
	Timeout time.Duration
	Out     io.Writer
	// Runtimes is how the runtimes ran (the environment's mode); it is
	// printed with the figures.
	Runtimes podprocess.Mode
}

func (o RestartOptions) withDefaults() RestartOptions {
	if o.MidDrain == 0 {
		o.MidDrain = max(o.Sessions/5, 1)
	}
	if o.Quiet == 0 {
		o.Quiet = 10 * time.Second
	}
	if o.Window == 0 {
		o.Window = 2 * time.Minute
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	return o
}

// busyTurn is the length of every turn of the benchmark's runtimes: so
// long that no runtime drains while it runs, and a drain request stays
// outstanding.
const busyTurn = "24h"

// pollEvery is how often the restarted controller's /metrics is read: the
// resolution of the durations measured.
const pollEvery = 100 * time.Millisecond

// RunRestart measures a controller crash at scale on env: o.Sessions
// sessions whose runtimes are each in a turn that outlasts the run; a
// runtime update under Drain with maxUnavailable o.MidDrain, so that
// exactly that many sessions have a drain request outstanding and none
// can drain; then, once the controller has been quiet for o.Quiet, the
// drain requests are recorded, the controller is killed with SIGKILL and
// started again, and its new process is watched: how soon it acts, what
// it writes, and whether the requests it finds survive it. It fails if
// the setup cannot be reached (sessions not starting, runtimes not
// busy, a different number of drains than o.MidDrain).
func RunRestart(ctx context.Context, env *localenv.Env, o RestartOptions) (_ RestartResult, err error) {
	defer func() { err = scenario.Interrupted(ctx, err) }()
	o = o.withDefaults()
	if o.MidDrain > o.Sessions {
		return RestartResult{}, fmt.Errorf("%d sessions mid-drain out of %d: at most every session can be", o.MidDrain, o.Sessions)
	}
	c, err := scenario.NewClient(env.Cluster.Config)
	if err != nil {
		return RestartResult{}, err
	}
	tmpl := scenario.Template(o.Namespace, "restart", "example.com/lull/turnrunner:v1",
		"--turn-min="+busyTurn, "--turn-max="+busyTurn, "--think-max=0s")
	wave := intstr.FromInt32(int32(o.MidDrain))
	tmpl.Spec.UpdatePolicy.MaxUnavailable = &wave
	start := time.Now()
	names, err := scenario.Launch(ctx, c, tmpl, "r", o.Sessions)
	if err != nil {
		return RestartResult{}, err
	}
	if _, err := scenario.WaitFor(ctx, c, o.Namespace, names, time.Second, o.Timeout, startProgress(o.Out, start), scenario.Converged); err != nil {
		return RestartResult{}, fmt.Errorf("sessions did not start: %w", err)
	}
	if err := waitSessions(ctx, c, o, "every runtime connected", connected); err != nil {
		return RestartResult{}, err
	}
	// A runtime begins its first turn as it starts (--think-max=0s), but
	// reports the turn count only with its next report (a minute later
	// while it serves); a moment more and every one is in a turn. One
	// that is not would drain, and midDrain says so.
	if err := scenario.Sleep(ctx, time.Second); err != nil {
		return RestartResult{}, err
	}
	fmt.Fprintf(o.Out, "%d sessions running, every runtime connected and in a %s turn (%s)\n", o.Sessions, busyTurn, time.Since(start).Round(time.Second))

	start = time.Now()
	if err := scenario.SetImage(ctx, c, o.Namespace, tmpl.Name, "example.com/lull/turnrunner:v2"); err != nil {
		return RestartResult{}, err
	}
	if err := waitSessions(ctx, c, o, fmt.Sprintf("%d drain requests outstanding", o.MidDrain), midDrain(o.MidDrain)); err != nil {
		return RestartResult{}, err
	}
	fmt.Fprintf(o.Out, "runtime updated: %d drain requests outstanding, none drained (%s)\n", o.MidDrain, time.Since(start).Round(100*time.Millisecond))
	if err := waitQuiet(ctx, env.MetricsURL(), o.Quiet, o.Timeout); err != nil {
		return RestartResult{}, err
	}
	var list lullv1.SessionList
	if err := c.List(ctx, &list, client.InNamespace(o.Namespace)); err != nil {
		return RestartResult{}, err
	}
	if err := midDrain(o.MidDrain)(list.Items); err != nil {
		return RestartResult{}, fmt.Errorf("after the controller went quiet: %w", err)
	}
	before := SnapshotDrains(list.Items)
	fmt.Fprintf(o.Out, "controller quiet for %s; %d drain requests recorded; killing it (SIGKILL)\n", o.Quiet, len(before))

	env.KillController()
	r, err := watchRestart(ctx, env, o)
	if err != nil {
		return RestartResult{}, err
	}
	f, err := scenario.Observe(ctx, c, o.Namespace, names)
	if err != nil {
		return RestartResult{}, err
	}
	if err := c.List(ctx, &list, client.InNamespace(o.Namespace)); err != nil {
		return RestartResult{}, err
	}
	pods := map[string]string{}
	for name, p := range f.Pods {
		pods[name] = p.UID
	}
	r.Requests = CompareRequests(before, SnapshotDrains(list.Items), pods)
	return r, nil
}

// watchRestart starts the controller again and reads its /metrics every
// pollEvery until every session was reconciled and it wrote nothing for
// o.Quiet, or o.Window passed.
func watchRestart(ctx context.Context, env *localenv.Env, o RestartOptions) (RestartResult, error) {
	r := RestartResult{Sessions: o.Sessions, MidDrain: o.MidDrain, Runtimes: o.Runtimes}
	start := time.Now()
	if err := env.StartController(ctx); err != nil {
		return r, err
	}
	r.Ready = time.Since(start)
	lastWrite, writes := start, 0.0
	var m controllerMetrics
	for {
		var err error
		if m, err = readControllerMetrics(ctx, env.MetricsURL()); err != nil {
			return r, err
		}
		now := time.Since(start)
		n := m.reconciles("session")
		if r.FirstReconcile == 0 && n > 0 {
			r.FirstReconcile = now
		}
		if r.AllReconciled == 0 && n >= float64(o.Sessions) {
			r.AllReconciled = now
			fmt.Fprintf(o.Out, "%7.1fs every session reconciled once\n", now.Seconds())
		}
		if w := m.writes().Total(); w != writes {
			if r.FirstWrite == 0 {
				r.FirstWrite = now
			}
			writes, lastWrite = w, time.Now()
		}
		settled := r.AllReconciled > 0 && time.Since(lastWrite) >= o.Quiet && now-r.AllReconciled >= o.Quiet
		if settled || now >= o.Window {
			r.Window = now
			break
		}
		if err := scenario.Sleep(ctx, pollEvery); err != nil {
			return r, err
		}
	}
	r.Writes, r.StatusWrites = m.writes(), m.statusWrites()
	var err error
	r.RSS, r.PeakRSS, err = residentSet(env.ControllerPID())
	return r, err
}

// waitQuiet waits until the controller has written nothing for quiet.
func waitQuiet(ctx context.Context, url string, quiet, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last, since := -1.0, time.Now()
	for {
		m, err := readControllerMetrics(ctx, url)
		if err != nil {
			return err
		}
		if w := m.writes().Total(); w != last {
			last, since = w, time.Now()
		}
		if time.Since(since) >= quiet {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the controller kept writing: never %s without a write within %s (%s)", quiet, timeout, m.writes())
		}
		if err := scenario.Sleep(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
}

// waitSessions lists the sessions every second until cond returns nil.
func waitSessions(ctx context.Context, c client.Client, o RestartOptions, what string, cond func([]lullv1.Session) error) error {
	deadline := time.Now().Add(o.Timeout)
	for {
		var list lullv1.SessionList
		if err := c.List(ctx, &list, client.InNamespace(o.Namespace)); err != nil {
			return err
		}
		err := cond(list.Items)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s: %w", what, o.Timeout, err)
		}
		if serr := scenario.Sleep(ctx, time.Second); serr != nil {
			return fmt.Errorf("%w waiting for %s: %v", serr, what, err)
		}
	}
}

// startProgress returns a WaitFor tick that prints how many sessions run,
// every 10 s while it changes.
func startProgress(out io.Writer, start time.Time) func(scenario.Fleet) {
	last, printed := -1, time.Time{}
	return func(f scenario.Fleet) {
		if f.Current != last && time.Since(printed) >= 10*time.Second {
			fmt.Fprintf(out, "%7.1fs starting: %d/%d sessions running\n", time.Since(start).Seconds(), f.Current, f.Sessions)
			last, printed = f.Current, time.Now()
		}
	}
}

// connected is a waitSessions condition: every session's runtime has
// reported for the session's current pod.
func connected(sessions []lullv1.Session) error {
	n := 0
	for _, s := range sessions {
		if rt := s.Status.Runtime; rt != nil && rt.PodUID != "" && rt.PodUID == s.Status.PodUID {
			n++
		}
	}
	if n < len(sessions) {
		return fmt.Errorf("%d of %d runtimes reported", n, len(sessions))
	}
	return nil
}

// midDrain returns a waitSessions condition: exactly want sessions have
// a drain request outstanding for their current pod, and none has
// drained (no Drained report, no committed replacement, every request
// for the pod the session runs). More than want, or a drained one, is a
// setup that cannot give the figures (the wave did not hold, or a
// runtime was not busy).
func midDrain(want int) func([]lullv1.Session) error {
	return func(sessions []lullv1.Session) error {
		n := 0
		for _, s := range sessions {
			d := s.Status.Drain
			switch {
			case s.Status.Replacement != nil || (s.Status.Runtime != nil && s.Status.Runtime.State == lullv1.RuntimeDrained):
				return fmt.Errorf("session %s drained: its runtime was not busy", s.Name)
			case d == nil:
				continue
			case d.PodUID != s.Status.PodUID:
				return fmt.Errorf("session %s: drain request %s for pod %s, not its pod %s", s.Name, d.RequestID, d.PodUID, s.Status.PodUID)
			}
			n++
		}
		if n != want {
			return fmt.Errorf("%d drain requests outstanding, want %d", n, want)
		}
		return nil
	}
}
