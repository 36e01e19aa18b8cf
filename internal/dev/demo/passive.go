package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/localenv"
	"lull.dev/lull/internal/dev/scenario"
)

// Passive is what a Passive run adds to its summary: the convergence
// window the controller predicted and what happened.
type Passive struct {
	// Users says who the sessions' users are, e.g. "5 leave after 1 turn".
	Users []string
	// Published: the templates published an expected completion.
	Published bool
	// Predicted is the first expected completion published after the
	// rollout began (the latest over the templates), Final the last one
	// seen; PublishedAfter is how long after the rollout it appeared.
	Predicted, Final time.Time
	PublishedAfter   time.Duration
	// Start and End are when the rollout began and when every session ran
	// the new revision (or, suspended, would resume onto it).
	Start, End time.Time
	// Suspensions counts the sessions seen becoming suspended, Resumed
	// those the demo resumed, Restarts those that moved to the new revision
	// while running (restarted at their maximum lifetime).
	Suspensions, Resumed, Restarts int
	// Suspended counts the sessions suspended at the end: their pods are
	// gone, and they resume onto the new revision.
	Suspended int
	Converged bool
}

// user is one kind of session user, and the template its sessions use:
// the runtime's --turns is a container argument, the same for every
// session of a template, so each kind of user has its own template.
type user struct {
	template string
	// turns is how many turns the user takes before leaving the session
	// idle; 0: the user keeps working.
	turns int
	n     int
}

// users splits n sessions among three kinds of user: about a quarter (at
// least one) keep working, so only maxLifetime bounds their move; the rest,
// split evenly, take one turn or four and leave. Turns of random length
// spread when each of those goes idle, and so when each is culled.
func users(n int) []user {
	working := max(1, n/4)
	brief := (n - working + 1) / 2
	return []user{
		{template: "one-turn", turns: 1, n: brief},
		{template: "four-turns", turns: 4, n: n - working - brief},
		{template: "working", turns: 0, n: working},
	}
}

func (u user) String() string {
	switch u.turns {
	case 0:
		return fmt.Sprintf("%d keep working", u.n)
	case 1:
		return fmt.Sprintf("%d leave after 1 turn", u.n)
	}
	return fmt.Sprintf("%d leave after %d turns", u.n, u.turns)
}

// passiveTemplate is the SessionTemplate of one kind of user.
func passiveTemplate(o Options, u user, image string) *lullv1.SessionTemplate {
	args := []string{"--turn-min=" + o.TurnMin.String(), "--turn-max=" + o.TurnMax.String(), "--think-max=" + o.ThinkMax.String(),
		"--report-refresh=" + o.ReportRefresh.String()}
	if u.turns > 0 {
		args = append(args, fmt.Sprintf("--turns=%d", u.turns))
	}
	t := scenario.Template(o.Namespace, u.template, image, args...)
	t.Spec.UpdatePolicy.Strategy = lullv1.UpdateStrategyPassive
	t.Spec.Idle = &lullv1.IdlePolicy{SuspendAfter: &metav1.Duration{Duration: o.IdleSuspendAfter}}
	t.Spec.MaxLifetime = &metav1.Duration{Duration: o.MaxLifetime}
	return t
}

// view is one session as the demo sees it: its spec, its running pod's
// and its StatefulSet's template revision (from their labels), and its
// outstanding drain request.
type view struct {
	Name, Template string
	// Suspend is spec.suspend; Suspended, status.phase Suspended.
	Suspend, Suspended bool
	// Pod is the template revision of the session's running pod, "" if it
	// has none; Set the one its StatefulSet would start a pod on.
	Pod, Set string
	// Drain is the reason of its drain request, if any.
	Drain lullv1.DrainReason
}

// observe reads the demo's templates and sessions.
func observe(ctx context.Context, c client.Client, ns string) ([]lullv1.SessionTemplate, []view, error) {
	var templates lullv1.SessionTemplateList
	if err := c.List(ctx, &templates, client.InNamespace(ns)); err != nil {
		return nil, nil, err
	}
	var sessions lullv1.SessionList
	if err := c.List(ctx, &sessions, client.InNamespace(ns)); err != nil {
		return nil, nil, err
	}
	var sets appsv1.StatefulSetList
	if err := c.List(ctx, &sets, client.InNamespace(ns), client.HasLabels{lullv1.LabelSession}); err != nil {
		return nil, nil, err
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns), client.HasLabels{lullv1.LabelSession}); err != nil {
		return nil, nil, err
	}
	set, pod := map[string]string{}, map[string]string{}
	for _, s := range sets.Items {
		set[s.Name] = s.Spec.Template.Labels[lullv1.LabelTemplateRevision]
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			pod[p.Labels[lullv1.LabelSession]] = p.Labels[lullv1.LabelTemplateRevision]
		}
	}
	views := make([]view, 0, len(sessions.Items))
	for _, s := range sessions.Items {
		v := view{Name: s.Name, Template: s.Spec.TemplateRef.Name, Suspend: s.Spec.Suspend, Suspended: s.Status.Phase == lullv1.SessionSuspended,
			Pod: pod[s.Name], Set: set[s.Name]}
		if d := s.Status.Drain; d != nil {
			v.Drain = d.Reason
		}
		views = append(views, v)
	}
	return templates.Items, views, nil
}

// history is what the demo remembers of its sessions across observations,
// from the rollout on.
type history struct {
	// old is the template revision each template's sessions ran before the
	// rollout.
	old map[string]string
	// last is the template revision of each session's last running pod
	// seen.
	last map[string]string
	// waiting are the sessions suspended off the old revision, with when
	// they were first seen so: their users come back.
	waiting map[string]time.Time
	// resumed are the sessions the demo resumed that have not run a pod
	// since.
	resumed map[string]bool
	// suspended are the sessions suspended (no pod) at the last look.
	suspended map[string]bool
	// Suspensions and Resumes count the sessions seen becoming suspended
	// and resumed by the demo; Restarts those seen running the new
	// revision after running the old one, neither suspended nor resumed in
	// between (restarted at their maximum lifetime).
	Suspensions, Resumes, Restarts int
}

// newHistory starts a history from the sessions before the rollout, every
// one of them running its template's old revision.
func newHistory(before []view) *history {
	h := &history{old: map[string]string{}, last: map[string]string{}, waiting: map[string]time.Time{}, resumed: map[string]bool{},
		suspended: map[string]bool{}}
	for _, v := range before {
		h.old[v.Template] = v.Pod
		h.last[v.Name] = v.Pod
	}
	return h
}

// see records views, observed at now, and returns the sessions whose user
// comes back now: suspended off the old revision (spec and phase, pod
// gone) for at least after. A session suspended again after running the
// new revision has converged, and its user stays away.
func (h *history) see(views []view, now time.Time, after time.Duration) []string {
	var due []string
	suspended := map[string]bool{}
	for _, v := range views {
		if v.Pod != "" {
			old := h.old[v.Template]
			if v.Pod != old && h.last[v.Name] == old && !h.suspended[v.Name] && !h.resumed[v.Name] {
				h.Restarts++
			}
			h.last[v.Name] = v.Pod
			delete(h.resumed, v.Name)
		}
		if !v.Suspend || v.Pod != "" {
			continue
		}
		suspended[v.Name] = true
		if !h.suspended[v.Name] {
			h.Suspensions++
		}
		if !v.Suspended || h.last[v.Name] != h.old[v.Template] {
			continue
		}
		if _, ok := h.waiting[v.Name]; !ok {
			h.waiting[v.Name] = now
		}
		if now.Sub(h.waiting[v.Name]) >= after {
			due = append(due, v.Name)
		}
	}
	for name := range h.waiting {
		if !suspended[name] {
			delete(h.waiting, name) // resumed by someone else
		}
	}
	h.suspended = suspended
	sort.Strings(due)
	return due
}

// resume records that the demo resumed the session name.
func (h *history) resume(name string) {
	delete(h.waiting, name)
	h.resumed[name] = true
	h.Resumes++
}

// tally is the fleet's progress after the rollout began.
type tally struct {
	Sessions int
	// Converged sessions run a pod of their template's new revision, or
	// have no pod and resume onto it: resumed by the demo, or suspended
	// again after running it.
	Converged int
	// Suspended sessions have no pod.
	Suspended int
	Draining  int
}

// Done reports whether every session has converged.
func (t tally) Done() bool { return t.Converged == t.Sessions }

// count tallies views.
func (h *history) count(views []view) tally {
	t := tally{Sessions: len(views)}
	for _, v := range views {
		old := h.old[v.Template]
		switch {
		case v.Pod != "":
			if v.Pod != old {
				t.Converged++
			}
		case v.Set == "" || v.Set == old:
		case h.resumed[v.Name] || (v.Suspend && h.last[v.Name] != old):
			t.Converged++
		}
		if v.Suspend && v.Pod == "" {
			t.Suspended++
		}
		if v.Drain != "" {
			t.Draining++
		}
	}
	return t
}

// line is the progress line of a tally.
func (t tally) line() string {
	return fmt.Sprintf("  %3d/%d on the new revision, %d suspended, %d draining", t.Converged, t.Sessions, t.Suspended, t.Draining)
}

// window returns the rollout's expected completion as the templates
// publish it: the latest of their status.expectedCompletion. ok is false
// until every template has seen its new revision (its status.revision is
// no longer the one in old), and while any with stale running sessions has
// published none (one has no deadline: withoutDeadline). A template with
// nothing stale running has none and does not count.
func window(templates []lullv1.SessionTemplate, old map[string]string) (eta time.Time, ok bool) {
	for _, t := range templates {
		st := t.Status
		if st.ObservedGeneration < t.Generation || st.Revision == "" || st.Revision == old[t.Name] {
			return time.Time{}, false
		}
		if st.Stale == 0 {
			continue
		}
		if st.ExpectedCompletion == nil || st.WithoutDeadline > 0 {
			return time.Time{}, false
		}
		if st.ExpectedCompletion.After(eta) {
			eta = st.ExpectedCompletion.Time
		}
	}
	return eta, !eta.IsZero()
}

// resume sets spec.suspend=false, as lull resume does for a suspended
// session.
func resume(ctx context.Context, c client.Client, ns, name string) error {
	s := &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	return c.Patch(ctx, s, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":false}}`)))
}

// runPassive plays the Passive demo: sessions of three kinds of user
// (users), one template each, with an idle suspend limit and a maximum
// lifetime; a new image rolled out under Passive, which drains no session
// for it. Each session moves when it is culled for idleness (suspended,
// then resumed by the demo as its user comes back: the new pod runs the new
// revision) or restarted at its maximum lifetime. It prints the templates'
// expected completion once published, progress, and ends when every
// session runs the new revision or, suspended, would resume onto it.
func runPassive(ctx context.Context, env *localenv.Env, o Options) (_ Summary, err error) {
	defer func() { err = scenario.Interrupted(ctx, err) }()
	out := o.Out
	c, auditor, err := connect(ctx, env)
	if err != nil {
		return Summary{}, err
	}
	const v1, v2 = "example.com/lull/turnrunner:v1", "example.com/lull/turnrunner:v2"
	p := &Passive{}
	var names, templates []string
	for _, u := range users(o.Sessions) {
		if u.n == 0 {
			continue
		}
		made, err := scenario.Launch(ctx, c, passiveTemplate(o, u, v1), u.template, u.n)
		if err != nil {
			return Summary{}, err
		}
		names = append(names, made...)
		templates = append(templates, u.template)
		p.Users = append(p.Users, u.String())
	}
	fmt.Fprintf(out, "\ncreated %d sessions in %d SessionTemplates (image %s, strategy Passive, idle.suspendAfter %s, maxLifetime %s): %s\n",
		o.Sessions, len(templates), v1, o.IdleSuspendAfter, o.MaxLifetime, strings.Join(p.Users, ", "))
	if _, err := scenario.WaitFor(ctx, c, o.Namespace, names, 500*time.Millisecond, 2*time.Minute, nil, scenario.Converged); errors.Is(err, scenario.ErrInterrupted) {
		return Summary{}, fmt.Errorf("start of the sessions %w", err)
	} else if err != nil {
		return Summary{}, fmt.Errorf("sessions did not start: %w", err)
	}
	fmt.Fprintf(out, "all %d sessions running; their runtimes take turns of %s–%s and write their activity within %s\n", o.Sessions, o.TurnMin, o.TurnMax, o.ReportRefresh)
	if err := scenario.Sleep(ctx, o.Warmup); err != nil {
		return Summary{}, err
	}
	_, views, err := observe(ctx, c, o.Namespace)
	if err != nil {
		return Summary{}, err
	}
	h := newHistory(views)

	fmt.Fprintf(out, "\nrolling out image %s (strategy Passive: no session is drained for the update; each moves when culled for idleness or restarted at its maximum lifetime)\n", v2)
	p.Start = time.Now()
	for _, t := range templates {
		if err := scenario.SetImage(ctx, c, o.Namespace, t, v2); err != nil {
			return Summary{}, err
		}
	}
	// The window is long: the last sessions move at their maximum lifetime,
	// one wave after another.
	timeout := max(o.Timeout, 2*o.MaxLifetime+time.Minute)
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	elapsed := func() string { return fmt.Sprintf("%6.1fs", time.Since(p.Start).Seconds()) }
	last := ""
	var now tally
	for {
		templateList, views, oerr := observe(wctx, c, o.Namespace)
		if oerr == nil {
			for _, name := range h.see(views, time.Now(), o.ResumeAfter) {
				if err := resume(wctx, c, o.Namespace, name); err != nil {
					return Summary{}, fmt.Errorf("resume session %s: %w", name, err)
				}
				h.resume(name)
			}
			if eta, ok := window(templateList, h.old); ok && !eta.Equal(p.Final) {
				if !p.Published {
					p.Published, p.Predicted, p.PublishedAfter = true, eta, time.Since(p.Start)
					fmt.Fprintf(out, "%s   expected completion published: expected to finish in %s (at %s, %s after the rollout began)\n",
						elapsed(), time.Until(eta).Round(100*time.Millisecond), eta.Format(time.TimeOnly), eta.Sub(p.Start).Round(100*time.Millisecond))
				} else {
					fmt.Fprintf(out, "%s   expected completion now %s (%s after the rollout began)\n", elapsed(), eta.Format(time.TimeOnly), eta.Sub(p.Start).Round(100*time.Millisecond))
				}
				p.Final = eta
			}
			now = h.count(views)
			if line := now.line(); line != last {
				fmt.Fprintf(out, "%s %s\n", elapsed(), line)
				last = line
			}
			if now.Done() {
				break
			}
		}
		if err := scenario.Sleep(wctx, 500*time.Millisecond); errors.Is(err, scenario.ErrInterrupted) {
			return Summary{}, fmt.Errorf("rollout %w with %d of %d sessions on the new revision", err, now.Converged, now.Sessions)
		} else if err != nil {
			return Summary{}, fmt.Errorf("rollout did not converge after %s: %d of %d sessions on the new revision, %d suspended, %d draining",
				timeout, now.Converged, now.Sessions, now.Suspended, now.Draining)
		}
	}
	p.End, p.Converged, p.Suspended = time.Now(), true, now.Suspended
	p.Suspensions, p.Resumed, p.Restarts = h.Suspensions, h.Resumes, h.Restarts

	// As under Drain: let the last new pods start their first turns.
	if err := scenario.Sleep(ctx, time.Second); err != nil {
		return Summary{}, err
	}
	after, err := scenario.Observe(ctx, c, o.Namespace, names)
	if err != nil {
		return Summary{}, err
	}
	rep, err := auditor.Check(env.Runner.JournalDir(), o.Namespace)
	if err != nil {
		return Summary{}, err
	}
	return Summary{Sessions: o.Sessions, TurnsCompleted: rep.Completed, TurnsInterrupted: len(rep.Interrupted), TurnsRefused: rep.Refused,
		Replaced: len(rep.Deletions), Converge: p.End.Sub(p.Start), Revisions: after.Revisions, Violations: rep.Violations, Passive: p}, nil
}

// printPassive writes the summary of a Passive run.
func (s Summary) printPassive(w io.Writer) {
	p := s.Passive
	fmt.Fprintf(w, "\nsummary\n")
	fmt.Fprintf(w, "  sessions:            %d (%s)\n", s.Sessions, strings.Join(p.Users, ", "))
	fmt.Fprintf(w, "  idle suspensions:    %d; %d resumed by their users (the demo)\n", p.Suspensions, p.Resumed)
	fmt.Fprintf(w, "  lifetime restarts:   %d (sessions that moved while running)\n", p.Restarts)
	fmt.Fprintf(w, "  pods removed:        %d (replaced or scaled away, each after its runtime drained)\n", s.Replaced)
	fmt.Fprintf(w, "  turns completed:     %d\n", s.TurnsCompleted)
	fmt.Fprintf(w, "  turns interrupted:   %d\n", s.TurnsInterrupted)
	fmt.Fprintf(w, "  turns refused while draining (client retried on the new pod): %d\n", s.TurnsRefused)
	if p.Published {
		fmt.Fprintf(w, "  predicted window:    %s (status.expectedCompletion, published %s after the rollout began)\n",
			p.Predicted.Sub(p.Start).Round(100*time.Millisecond), p.PublishedAfter.Round(100*time.Millisecond))
		if !p.Final.Equal(p.Predicted) {
			fmt.Fprintf(w, "  last prediction:     %s\n", p.Final.Sub(p.Start).Round(100*time.Millisecond))
		}
	} else {
		fmt.Fprintf(w, "  predicted window:    never published\n")
	}
	fmt.Fprintf(w, "  time to converge:    %s", s.Converge.Round(100*time.Millisecond))
	if p.Published {
		fmt.Fprintf(w, " (%s after the predicted completion)", signed(p.End.Sub(p.Predicted)))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  revisions now:       %s", revisionList(s.Revisions))
	if p.Suspended > 0 {
		fmt.Fprintf(w, "; %d suspended (a resume starts the new revision)", p.Suspended)
	}
	fmt.Fprintln(w)
	for _, v := range s.Violations {
		fmt.Fprintf(w, "  VIOLATION: %s\n", v)
	}
	if s.OK() {
		fmt.Fprintf(w, "  result:              every session on the new revision of its template, no turn interrupted\n")
	} else {
		fmt.Fprintf(w, "  result:              FAILED\n")
	}
}

// signed formats d to the tenth of a second with its sign.
func signed(d time.Duration) string {
	d = d.Round(100 * time.Millisecond)
	if d < 0 {
		return "-" + (-d).String()
	}
	return "+" + d.String()
}
