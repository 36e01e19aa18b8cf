package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/journal"
	"lull.dev/lull/internal/dev/scenario"
)

// notices returns the notices journaled by the runtime of pod.
func notices(t *testing.T, pod types.UID) []journal.Entry {
	t.Helper()
	entries, err := journal.ReadDir(env.Runner.JournalDir())
	if err != nil {
		t.Fatal(err)
	}
	var out []journal.Entry
	for _, e := range entries {
		if e.PodUID == pod && e.Event == journal.Notice {
			out = append(out, e)
		}
	}
	return out
}

func policy(p lullv1.UpdatePolicy) func(*lullv1.SessionTemplate) {
	return func(t *lullv1.SessionTemplate) { t.Spec.UpdatePolicy = p }
}

// Passive: a busy stale session is never drained; its runtime is told an
// update is pending; it converges once suspended and resumed, and a new
// session starts on the new revision.
func TestPassiveLeavesBusySessionsAlone(t *testing.T) {
	ns, names, before := setupTemplate(t, 2, policy(lullv1.UpdatePolicy{Strategy: lullv1.UpdateStrategyPassive}),
		"--turn-min=200ms", "--turn-max=1s", "--think-max=100ms")
	rollout(t, ns, "example.com/lull/turnrunner:v2")
	name := names[0]
	old := types.UID(before.Pods[name].UID)
	eventually(t, 20*time.Second, "UpToDate=False UpdatePending", func() error {
		c := meta.FindStatusCondition(session(t, ns, name).Status.Conditions, lullv1.ConditionUpToDate)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "UpdatePending" {
			return fmt.Errorf("UpToDate = %+v", c)
		}
		return nil
	})
	eventually(t, 20*time.Second, "the runtime was told an update is pending", func() error {
		for _, n := range notices(t, old) {
			if n.UpdatePending {
				return nil
			}
		}
		return fmt.Errorf("no notice with updatePending on %s", old)
	})
	never(t, 5*time.Second, "a Passive session is never drained", func() error {
		s := session(t, ns, name)
		if s.Status.Drain != nil {
			return fmt.Errorf("drain requested: %+v", s.Status.Drain)
		}
		if p := pod(t, ns, name); p == nil || p.UID != old {
			return fmt.Errorf("pod replaced")
		}
		return nil
	})

	// A new session starts on the new revision.
	if _, err := scenario.CreateSessions(context.Background(), c, ns, "rt", "new", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := scenario.WaitFor(context.Background(), c, ns, []string{"new-0"}, 200*time.Millisecond, time.Minute, nil, scenario.Converged); err != nil {
		t.Fatalf("new session: %v", err)
	}
	oldRev := pod(t, ns, name).Labels[lullv1.LabelTemplateRevision] // the stale session's pod
	if got := pod(t, ns, "new-0").Labels[lullv1.LabelTemplateRevision]; got == "" || got == oldRev {
		t.Fatalf("new session's pod runs template revision %q, want the new one (the old is %q)", got, oldRev)
	}

	// Suspended and resumed: on the new revision.
	setSuspend(t, ns, name, true)
	eventually(t, time.Minute, name+" suspended", func() error {
		if p := pod(t, ns, name); p != nil {
			return fmt.Errorf("pod %s still there", p.UID)
		}
		return nil
	})
	setSuspend(t, ns, name, false)
	if _, err := scenario.WaitFor(context.Background(), c, ns, []string{name}, 200*time.Millisecond, time.Minute, nil, scenario.Converged); err != nil {
		t.Fatalf("resumed session did not converge: %v", err)
	}
	if p := pod(t, ns, name); p == nil || p.UID == old {
		t.Fatal("resumed session kept its old pod")
	}
	// The other session is still untouched.
	if p := pod(t, ns, names[1]); p == nil || string(p.UID) != before.Pods[names[1]].UID {
		t.Error("the other Passive session was replaced")
	}
}

// Replace: a stale pod is replaced at once, busy or not, with a Warning
// Event; the runtime was told its deadline (now); the auditor allows the
// interrupted turn because the deadline had passed.
func TestReplaceStrategyReplacesAtOnce(t *testing.T) {
	ns, names, before := setupTemplate(t, 1, policy(lullv1.UpdatePolicy{Strategy: lullv1.UpdateStrategyReplace}),
		"--turn-min=1h", "--turn-max=1h", "--think-max=0s")
	name := names[0]
	old := types.UID(before.Pods[name].UID)
	eventually(t, 10*time.Second, "turn begins", func() error { return openTurn(t, old) })
	rollout(t, ns, "example.com/lull/turnrunner:v2")
	replacedAll(t, ns, names, before)
	ev := wantEvent(t, ns, name, "Replaced")
	if ev.Type != corev1.EventTypeWarning {
		t.Errorf("Replaced event is %s, want Warning", ev.Type)
	}
}

// drainTimeout with onDrainTimeout Replace: the deadline is in the request,
// the runtime sees it, and once it passes the busy pod is replaced with a
// Warning Event that says so.
func TestDrainDeadline(t *testing.T) {
	ns, names, before := setupTemplate(t, 1, policy(lullv1.UpdatePolicy{Strategy: lullv1.UpdateStrategyDrain,
		DrainTimeout: &metav1.Duration{Duration: 4 * time.Second}, OnDrainTimeout: lullv1.DrainTimeoutReplace}),
		"--turn-min=1h", "--turn-max=1h", "--think-max=0s")
	name := names[0]
	old := types.UID(before.Pods[name].UID)
	eventually(t, 10*time.Second, "turn begins", func() error { return openTurn(t, old) })
	rollout(t, ns, "example.com/lull/turnrunner:v2")
	var deadline time.Time
	eventually(t, 10*time.Second, "drain requested with a deadline", func() error {
		d := session(t, ns, name).Status.Drain
		if d == nil || d.Deadline == nil {
			return fmt.Errorf("drain %+v", d)
		}
		deadline = d.Deadline.Time
		return nil
	})
	eventually(t, 10*time.Second, "the runtime saw the deadline", func() error {
		for _, n := range notices(t, old) {
			if n.Deadline != nil && n.Deadline.Equal(deadline) {
				return nil
			}
		}
		return fmt.Errorf("no notice of deadline %s on %s", deadline, old)
	})
	replacedAll(t, ns, names, before)
	ev := wantEvent(t, ns, name, "DrainDeadlineExceeded")
	if ev.Type != corev1.EventTypeWarning {
		t.Errorf("DrainDeadlineExceeded event is %s, want Warning", ev.Type)
	}
	if ev.EventTime.Time.Before(deadline) && ev.CreationTimestamp.Time.Before(deadline) {
		t.Errorf("pod replaced at %s, before the deadline %s", ev.CreationTimestamp, deadline)
	}
}

// waveWatcher follows every version of a namespace's Sessions through a
// watch and records the most that were moving at once: an Update drain
// request outstanding, a replacement committed, or not Ready.
type waveWatcher struct {
	mu     sync.Mutex
	moving map[string]bool
	// served: the sessions seen Ready at least once. One that has never
	// been is starting, not moving: its first status write may come after
	// the test saw its pod run.
	served map[string]bool
	why    map[string]string
	most   int
	at     []string // the sessions moving when most was reached
}

func watchWave(t *testing.T, ns string) *waveWatcher {
	t.Helper()
	cw, err := client.NewWithWatch(env.Cluster.Config, client.Options{Scheme: c.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := cw.Watch(ctx, &lullv1.SessionList{}, client.InNamespace(ns))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	ww := &waveWatcher{moving: map[string]bool{}, served: map[string]bool{}, why: map[string]string{}}
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); w.Stop(); <-done })
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*lullv1.Session)
			if !ok {
				continue
			}
			moving := !s.Spec.Suspend && ((s.Status.Drain != nil && (s.Status.Drain.Reason == lullv1.DrainReasonUpdate || s.Status.Drain.Reason == lullv1.DrainReasonLifetime)) || s.Status.Replacement != nil ||
				!meta.IsStatusConditionTrue(s.Status.Conditions, lullv1.ConditionReady))
			ww.mu.Lock()
			if meta.IsStatusConditionTrue(s.Status.Conditions, lullv1.ConditionReady) {
				ww.served[s.Name] = true
			}
			ww.moving[s.Name] = moving && ev.Type != watch.Deleted && ww.served[s.Name]
			ww.why[s.Name] = fmt.Sprintf("rv %s seq %d drain %v replacement %v ready %v", s.ResourceVersion, s.Status.DrainSequence, s.Status.Drain != nil, s.Status.Replacement != nil,
				meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionReady))
			n := 0
			var at []string
			for name, m := range ww.moving {
				if m {
					n++
					at = append(at, name+": "+ww.why[name])
				}
			}
			if n > ww.most {
				ww.most, ww.at = n, at
			}
			ww.mu.Unlock()
		}
	}()
	return ww
}

// A wave of 2 over 20 sessions, observed by a live watch of the sessions,
// never has more than 2 moving at once, even with the controller killed
// and restarted in the middle of it.
func TestWaveBoundHoldsAcrossControllerRestart(t *testing.T) {
	two := intstr.FromInt32(2)
	ns, names, before := setupTemplate(t, 20, policy(lullv1.UpdatePolicy{Strategy: lullv1.UpdateStrategyDrain, MaxUnavailable: &two}),
		"--turn-min=200ms", "--turn-max=1500ms", "--think-max=200ms")
	// The pods run; wait until every session's status says so too, or the
	// watch would count a session whose Ready is not written yet.
	eventually(t, 30*time.Second, "every session Ready", func() error {
		for _, name := range names {
			if !meta.IsStatusConditionTrue(session(t, ns, name).Status.Conditions, lullv1.ConditionReady) {
				return fmt.Errorf("%s not Ready yet", name)
			}
		}
		return nil
	})
	ww := watchWave(t, ns)
	rollout(t, ns, "example.com/lull/turnrunner:v2")
	time.Sleep(3 * time.Second) // in the middle of the wave
	env.KillController()
	if err := env.StartController(context.Background()); err != nil {
		t.Fatal(err)
	}
	replacedAll(t, ns, names, before)
	ww.mu.Lock()
	defer ww.mu.Unlock()
	switch {
	case ww.most > 2:
		t.Errorf("%d sessions moving at once (%v), want at most maxUnavailable 2", ww.most, ww.at)
	case ww.most < 2:
		t.Errorf("at most %d session moving at once: the wave of 2 was never used", ww.most)
	}
}

// setArgs changes the runtime container's args of the template rt: a new
// revision.
func setArgs(t *testing.T, ns string, args ...string) {
	t.Helper()
	tmpl := &lullv1.SessionTemplate{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "rt"}, tmpl); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(tmpl.DeepCopy())
	tmpl.RuntimeContainer().Args = args
	if err := c.Patch(context.Background(), tmpl, patch); err != nil {
		t.Fatal(err)
	}
}

func template(t *testing.T, ns string) *lullv1.SessionTemplate {
	t.Helper()
	tmpl := &lullv1.SessionTemplate{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "rt"}, tmpl); err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// The brake: a revision whose runtime cannot start (its arguments make it
// exit at once, as a broken image would) pauses the rollout once the first
// wave fails, naming the failing sessions, with a Warning Event; the other
// sessions keep their revision and pods. A fixed revision resumes it and
// every session converges.
func TestBrokenRevisionPausesTheRollout(t *testing.T) {
	two := intstr.FromInt32(2)
	turns := []string{"--turn-min=200ms", "--turn-max=800ms", "--think-max=200ms"}
	ns, names, before := setupTemplate(t, 6, policy(lullv1.UpdatePolicy{Strategy: lullv1.UpdateStrategyDrain, MaxUnavailable: &two}), turns...)
	setArgs(t, ns, "--turn-min=5s", "--turn-max=1s") // exits at once: turn-min > turn-max
	var failing []string
	eventually(t, time.Minute, "RolloutPaused=True FailureThreshold", func() error {
		tmpl := template(t, ns)
		c := meta.FindStatusCondition(tmpl.Status.Conditions, lullv1.ConditionRolloutPaused)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != "FailureThreshold" {
			return fmt.Errorf("RolloutPaused = %+v", c)
		}
		failing = tmpl.Status.Failing
		return nil
	})
	if len(failing) == 0 {
		t.Fatal("the paused template names no failing session")
	}
	wantTemplateEvent(t, ns, "rt", "FailureThreshold")
	// Held a while: the sessions not yet moved keep their pods.
	time.Sleep(3 * time.Second)
	moved := 0
	for _, name := range names {
		if p := pod(t, ns, name); p != nil && string(p.UID) == before.Pods[name].UID {
			if d := session(t, ns, name).Status.Drain; d != nil {
				t.Errorf("%s: a drain was started while the rollout is paused: %s", name, d.RequestID)
			}
			continue
		}
		moved++
	}
	if moved == 0 || moved > 2 {
		t.Errorf("%d sessions moved to the broken revision, want the first wave (1 or 2)", moved)
	}

	// The fix: a new revision releases the brake; everyone converges.
	setArgs(t, ns, turns...)
	if _, err := scenario.WaitFor(context.Background(), c, ns, names, 200*time.Millisecond, 2*time.Minute, nil, scenario.Converged); err != nil {
		t.Fatalf("after the fix: %v", err)
	}
	eventually(t, 20*time.Second, "RolloutPaused=False", func() error {
		if c := meta.FindStatusCondition(template(t, ns).Status.Conditions, lullv1.ConditionRolloutPaused); c == nil || c.Status != metav1.ConditionFalse {
			return fmt.Errorf("RolloutPaused = %+v", c)
		}
		return nil
	})
}

// Break-glass: sessions whose long turns would hold a drain for an hour are
// replaced once the grace passes, within the wave, and the template records
// who asked and why; the next routine revision drains without a deadline.
func TestBreakGlass(t *testing.T) {
	two := intstr.FromInt32(2)
	ns, names, before := setupTemplate(t, 4, policy(lullv1.UpdatePolicy{Strategy: lullv1.UpdateStrategyDrain, MaxUnavailable: &two}),
		"--turn-min=1h", "--turn-max=1h", "--think-max=0s")
	for _, name := range names {
		eventually(t, 10*time.Second, name+": turn begins", func() error { return openTurn(t, types.UID(before.Pods[name].UID)) })
	}
	rollout(t, ns, "example.com/lull/turnrunner:v2")
	// The break-glass comes to drains already held by the turns: it adds
	// its deadline to requests outstanding without one, and the auditor
	// must judge the deletions on that later version of each request.
	eventually(t, 20*time.Second, "two sessions draining, with no deadline", func() error {
		n := 0
		for _, name := range names {
			s := session(t, ns, name)
			if d, r := s.Status.Drain, s.Status.Runtime; d != nil && d.Deadline == nil && r != nil &&
				r.State == lullv1.RuntimeDraining && r.RequestID == d.RequestID && r.PodUID == d.PodUID {
				n++
			}
		}
		if n < 2 {
			return fmt.Errorf("%d draining", n)
		}
		return nil
	})
	out := lullCLI(t, "rollout", "force", "rt", "-n", ns, "--reason", "CVE-2026-0001 in the runtime", "--grace", "3s")
	if !strings.Contains(out, "break-glass for revision") {
		t.Errorf("lull rollout force said: %s", out)
	}
	after := replacedAll(t, ns, names, before)
	tmpl := template(t, ns)
	c := meta.FindStatusCondition(tmpl.Status.Conditions, lullv1.ConditionBreakGlass)
	if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "CVE-2026-0001") {
		t.Errorf("BreakGlass condition = %+v, want True with the reason", c)
	}
	if bg := tmpl.Spec.BreakGlass; bg == nil || bg.RequestedBy == "" || bg.RequestedAt == nil {
		t.Errorf("spec.breakGlass = %+v, want who and when", bg)
	}
	wantTemplateEvent(t, ns, "rt", "BreakGlass")
	for _, name := range names {
		wantEvent(t, ns, name, "DrainDeadlineExceeded")
	}

	// The next routine revision follows the policy: a drain, no deadline.
	rollout(t, ns, "example.com/lull/turnrunner:v3")
	var routine *lullv1.DrainRequest
	eventually(t, 20*time.Second, "a routine drain request", func() error {
		for _, name := range names {
			// The break-glass request for a pod it replaced may linger in
			// status for a moment: the routine one is for the new pod.
			if d := session(t, ns, name).Status.Drain; d != nil && d.Reason == lullv1.DrainReasonUpdate && d.PodUID == types.UID(after.Pods[name].UID) {
				routine = d
				return nil
			}
		}
		return fmt.Errorf("no drain request yet")
	})
	if routine.Deadline != nil {
		t.Errorf("the routine revision's drain request has a deadline %s: the break-glass outlived its revision", routine.Deadline)
	}
	eventually(t, 10*time.Second, "BreakGlass=False after a new revision", func() error {
		if c := meta.FindStatusCondition(template(t, ns).Status.Conditions, lullv1.ConditionBreakGlass); c == nil || c.Status != metav1.ConditionFalse {
			return fmt.Errorf("BreakGlass = %+v", c)
		}
		return nil
	})
}

// wantTemplateEvent returns the Event with reason on template name.
func wantTemplateEvent(t *testing.T, ns, name, reason string) {
	t.Helper()
	eventually(t, 10*time.Second, "template event "+reason, func() error {
		var list eventsv1.EventList
		if err := c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Kind == "SessionTemplate" && e.Regarding.Name == name && e.Reason == reason {
				if e.Type != corev1.EventTypeWarning {
					return fmt.Errorf("event %s is %s, want Warning", reason, e.Type)
				}
				return nil
			}
		}
		return fmt.Errorf("no %s event on SessionTemplate %s", reason, name)
	})
}
