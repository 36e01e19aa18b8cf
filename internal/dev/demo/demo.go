// Package demo is the scenario `lull dev --demo` plays: sessions whose
// runtimes are busy with turns, one runtime update rolled out under the
// Drain strategy (or Passive: see runPassive), progress as it happens, and
// a summary checked by an independent auditor.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/audit"
	"lull.dev/lull/internal/dev/localenv"
	"lull.dev/lull/internal/dev/scenario"
)

// Options shape the demo.
type Options struct {
	Namespace string
	Sessions  int
	// TurnMin, TurnMax and ThinkMax shape the runtimes' turns.
	TurnMin, TurnMax, ThinkMax time.Duration
	// Warmup is how long the sessions take turns before the rollout.
	Warmup time.Duration
	// Timeout bounds the rollout (under Passive, at least twice MaxLifetime
	// and a minute).
	Timeout time.Duration
	// Strategy is the rollout's update strategy: Drain or Passive.
	Strategy lullv1.UpdateStrategy
	// Under Passive: the templates' idle.suspendAfter and maxLifetime, the
	// runtimes' report refresh interval, and how long after a session is
	// suspended its user comes back (the demo resumes it).
	IdleSuspendAfter, MaxLifetime, ReportRefresh, ResumeAfter time.Duration
	// RealNode runs every session on the environment's real node, as real
	// containers of lull's images (Drain only).
	RealNode bool

	Out io.Writer
}

// Defaults returns the options `lull dev --demo` uses.
func Defaults() Options {
	return Options{Namespace: "demo", Sessions: 12, TurnMin: time.Second, TurnMax: 8 * time.Second, ThinkMax: time.Second,
		Warmup: 5 * time.Second, Timeout: 5 * time.Minute, Strategy: lullv1.UpdateStrategyDrain,
		IdleSuspendAfter: 20 * time.Second, MaxLifetime: 2 * time.Minute, ReportRefresh: 2 * time.Second, ResumeAfter: 3 * time.Second}
}

// Summary is the demo's result.
type Summary struct {
	Sessions         int
	TurnsCompleted   int
	TurnsInterrupted int
	TurnsRefused     int
	Replaced         int
	Converge         time.Duration
	Revisions        map[string]int
	NewRevision      string
	Violations       []string
	// Passive is the convergence window of a Passive run; nil under Drain.
	Passive *Passive
}

// OK reports whether the rollout kept the drain protocol: no interrupted
// turn, no violation, every session on one new revision (under Passive:
// every session on its template's new revision).
func (s Summary) OK() bool {
	if s.Passive != nil {
		return s.TurnsInterrupted == 0 && len(s.Violations) == 0 && s.Passive.Converged
	}
	return s.TurnsInterrupted == 0 && len(s.Violations) == 0 && len(s.Revisions) == 1 && s.Revisions[s.NewRevision] == s.Sessions
}

// Run plays the demo on env.
func Run(ctx context.Context, env *localenv.Env, o Options) (_ Summary, err error) {
	if o.Strategy == lullv1.UpdateStrategyPassive {
		return runPassive(ctx, env, o)
	}
	defer func() { err = scenario.Interrupted(ctx, err) }()
	out := o.Out
	c, auditor, err := connect(ctx, env)
	if err != nil {
		return Summary{}, err
	}
	args := []string{"--turn-min=" + o.TurnMin.String(), "--turn-max=" + o.TurnMax.String(), "--think-max=" + o.ThinkMax.String()}
	tpl := scenario.Template(o.Namespace, "agent", "example.com/lull/turnrunner:v1", args...)
	where := ""
	if o.RealNode {
		if err := env.OnRealNode(tpl); err != nil {
			return Summary{}, err
		}
		where = ", on the real node " + env.Cluster.RealNodeName
	}
	created := time.Now()
	names, err := scenario.Launch(ctx, c, tpl, "session", o.Sessions)
	if err != nil {
		return Summary{}, err
	}
	fmt.Fprintf(out, "\ncreated SessionTemplate %s/agent (image example.com/lull/turnrunner:v1) and %d sessions%s\n", o.Namespace, o.Sessions, where)
	before, err := scenario.WaitFor(ctx, c, o.Namespace, names, 500*time.Millisecond, 2*time.Minute, nil, scenario.Converged)
	if errors.Is(err, scenario.ErrInterrupted) {
		return Summary{}, fmt.Errorf("start of the sessions %w", err)
	} else if err != nil {
		return Summary{}, fmt.Errorf("sessions did not start: %w", err)
	}
	fmt.Fprintf(out, "all %d sessions running revision %s %.1fs after their creation; their runtimes are taking turns of %s–%s\n",
		o.Sessions, only(before.Revisions), time.Since(created).Seconds(), o.TurnMin, o.TurnMax)
	if err := scenario.Sleep(ctx, o.Warmup); err != nil {
		return Summary{}, err
	}

	fmt.Fprintf(out, "\nrolling out image example.com/lull/turnrunner:v2 (strategy Drain)\n")
	start := time.Now()
	if err := scenario.SetImage(ctx, c, o.Namespace, "agent", "example.com/lull/turnrunner:v2"); err != nil {
		return Summary{}, err
	}
	last := ""
	after, err := scenario.WaitFor(ctx, c, o.Namespace, names, 500*time.Millisecond, o.Timeout, func(f scenario.Fleet) {
		line := fmt.Sprintf("  %3d/%d on the new revision, %d draining", moved(before, f), f.Sessions, f.Draining)
		if line != last {
			fmt.Fprintf(out, "%6.1fs %s\n", time.Since(start).Seconds(), line)
			last = line
		}
	}, scenario.MovedFrom(before))
	converge := time.Since(start)
	if errors.Is(err, scenario.ErrInterrupted) {
		return Summary{}, fmt.Errorf("rollout %w", err)
	} else if err != nil {
		return Summary{}, fmt.Errorf("rollout did not converge: %w", err)
	}

	// Let the last replaced runtimes start their first turns, so the
	// journals show the new pods at work.
	if err := scenario.Sleep(ctx, time.Second); err != nil {
		return Summary{}, err
	}
	rep, err := auditor.Check(env.Runner.JournalDir(), o.Namespace)
	if err != nil {
		return Summary{}, err
	}
	s := Summary{Sessions: o.Sessions, TurnsCompleted: rep.Completed, TurnsInterrupted: len(rep.Interrupted), TurnsRefused: rep.Refused,
		Replaced: len(rep.Deletions), Converge: converge, Revisions: after.Revisions, NewRevision: only(after.Revisions), Violations: rep.Violations}
	return s, nil
}

// moved counts sessions whose running pod is on a revision other than the
// one it ran before the rollout.
func moved(before, now scenario.Fleet) int {
	n := 0
	for name, p := range now.Pods {
		if p.Revision != before.Pods[name].Revision {
			n++
		}
	}
	return n
}

func only(revs map[string]int) string {
	keys := make([]string, 0, len(revs))
	for k := range revs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

// Print writes the summary.
func (s Summary) Print(w io.Writer) {
	if s.Passive != nil {
		s.printPassive(w)
		return
	}
	fmt.Fprintf(w, "\nsummary\n")
	fmt.Fprintf(w, "  sessions:            %d\n", s.Sessions)
	fmt.Fprintf(w, "  pods replaced:       %d\n", s.Replaced)
	fmt.Fprintf(w, "  turns completed:     %d\n", s.TurnsCompleted)
	fmt.Fprintf(w, "  turns interrupted:   %d\n", s.TurnsInterrupted)
	fmt.Fprintf(w, "  turns refused while draining (client retried on the new pod): %d\n", s.TurnsRefused)
	fmt.Fprintf(w, "  time to converge:    %s\n", s.Converge.Round(100*time.Millisecond))
	fmt.Fprintf(w, "  revisions now:       %s\n", revisionList(s.Revisions))
	for _, v := range s.Violations {
		fmt.Fprintf(w, "  VIOLATION: %s\n", v)
	}
	if s.OK() {
		fmt.Fprintf(w, "  result:              every session on revision %s, no turn interrupted\n", s.NewRevision)
	} else {
		fmt.Fprintf(w, "  result:              FAILED\n")
	}
}

func revisionList(revs map[string]int) string {
	var parts []string
	for r, n := range revs {
		parts = append(parts, fmt.Sprintf("%s ×%d", r, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// connect returns a client of env's cluster and an auditor watching it.
func connect(ctx context.Context, env *localenv.Env) (client.Client, *audit.Auditor, error) {
	c, err := scenario.NewClient(env.Cluster.Config)
	if err != nil {
		return nil, nil, err
	}
	auditor, err := audit.Start(ctx, env.Cluster.EtcdURL)
	if err != nil {
		return nil, nil, err
	}
	return c, auditor, nil
}
