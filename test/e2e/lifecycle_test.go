package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/scenario"
)

func duration(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// idle sets the template's idle policy.
func idle(suspendAfter, deleteAfter time.Duration) func(*lullv1.SessionTemplate) {
	return func(t *lullv1.SessionTemplate) {
		t.Spec.Idle = &lullv1.IdlePolicy{}
		if suspendAfter > 0 {
			t.Spec.Idle.SuspendAfter = duration(suspendAfter)
		}
		if deleteAfter > 0 {
			t.Spec.Idle.DeleteAfter = duration(deleteAfter)
		}
	}
}

func all(edits ...func(*lullv1.SessionTemplate)) func(*lullv1.SessionTemplate) {
	return func(t *lullv1.SessionTemplate) {
		for _, e := range edits {
			e(t)
		}
	}
}

// withAgent runs the template's runtime behind the agent sidecar, which
// leaves a change of activity unwritten for refresh at most.
func withAgent(refresh time.Duration) func(*lullv1.SessionTemplate) {
	return func(t *lullv1.SessionTemplate) { t.Spec.Agent = &lullv1.AgentSpec{ReportRefresh: duration(refresh)} }
}

// eventCounts returns how often each Event reason was recorded for a
// session.
func eventCounts(t *testing.T, ns, name string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, e := range sessionEvents(t, ns, name) {
		n := 1
		if e.Series != nil {
			n = int(e.Series.Count)
		} else if e.DeprecatedCount > 1 {
			n = int(e.DeprecatedCount)
		}
		out[e.Reason] += n
	}
	return out
}

// An idle session is drained (reason Idle) and then suspended, its
// workspace claim kept, one Event each; under Passive, a stale idle session
// converges that way: resumed, it runs the update revision, and its idle
// clock starts from the new pod. The template's expected completion is the
// session's cull time.
func TestIdleSessionIsSuspendedThenResumed(t *testing.T) {
	ns, names, before := setupTemplate(t, 1, all(withWorkspace, idle(12*time.Second, 0), policy(lullv1.UpdatePolicy{Strategy: lullv1.UpdateStrategyPassive})),
		"--turns=1", "--turn-min=100ms", "--turn-max=100ms", "--think-max=0s", "--report-refresh=2s")
	idleName := names[0]
	oldPod := types.UID(before.Pods[idleName].UID)

	eventually(t, 20*time.Second, "the idle clock is shown", func() error {
		l := session(t, ns, idleName).Status.Lifecycle
		if l == nil || l.IdleSince == nil || l.CullAt == nil || l.CullAction != lullv1.IdleSuspend {
			return fmt.Errorf("status.lifecycle %+v", l)
		}
		return nil
	})
	rollout(t, ns, "example.com/lull/turnrunner:v2")
	cullAt := session(t, ns, idleName).Status.Lifecycle.CullAt
	eventually(t, 20*time.Second, "the template's Passive window is the latest cull time", func() error {
		tp := template(t, ns)
		if tp.Status.ExpectedCompletion == nil || tp.Status.ExpectedCompletion.Before(cullAt) {
			return fmt.Errorf("expectedCompletion %v, want at least the cull time %v (withoutDeadline %d)", tp.Status.ExpectedCompletion, cullAt, tp.Status.WithoutDeadline)
		}
		return nil
	})

	sawIdleDrain := false
	eventually(t, 40*time.Second, idleName+" drained for idleness and suspended", func() error {
		s := session(t, ns, idleName)
		if d := s.Status.Drain; d != nil && d.Reason == lullv1.DrainReasonIdle {
			sawIdleDrain = true
		}
		if !s.Spec.Suspend || s.Status.Phase != lullv1.SessionSuspended {
			return fmt.Errorf("suspend %v phase %s", s.Spec.Suspend, s.Status.Phase)
		}
		return nil
	})
	ev := eventCounts(t, ns, idleName)
	if !sawIdleDrain && ev["IdleCull"] == 0 {
		t.Errorf("no Idle drain request was seen before the suspension (events %v)", ev)
	}
	var pvc corev1.PersistentVolumeClaim
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "workspace-" + idleName + "-0"}, &pvc); err != nil {
		t.Fatalf("workspace claim of the suspended session: %v", err)
	}

	resumedAt := time.Now().Add(-time.Second)
	setSuspend(t, ns, idleName, false)
	after, err := scenario.WaitFor(context.Background(), c, ns, []string{idleName}, 200*time.Millisecond, time.Minute, nil, scenario.Converged)
	if err != nil {
		t.Fatalf("resumed session: %v", err)
	}
	newPod := types.UID(after.Pods[idleName].UID)
	if newPod == oldPod {
		t.Fatal("resumed session kept its pod")
	}
	if got, want := pod(t, ns, idleName).Labels[lullv1.LabelTemplateRevision], template(t, ns).Status.Revision; got != want {
		t.Errorf("resumed pod runs template revision %q, want the update revision %q", got, want)
	}
	eventually(t, 20*time.Second, "the new pod's idle clock", func() error {
		l := session(t, ns, idleName).Status.Lifecycle
		if l == nil || l.IdleSince == nil || l.IdlePodUID != newPod {
			return fmt.Errorf("status.lifecycle %+v", l)
		}
		if l.IdleSince.Time.Before(resumedAt) {
			return fmt.Errorf("idleSince %s is before the resume at %s: the old pod's activity was counted", l.IdleSince, resumedAt)
		}
		return nil
	})
	eventually(t, 10*time.Second, "one Suspended and one Resumed event", func() error {
		ev := eventCounts(t, ns, idleName)
		if ev["Suspended"] != 1 || ev["Resumed"] != 1 || ev["IdleSuspend"] != 1 {
			return fmt.Errorf("events %v", ev)
		}
		return nil
	})
}

// A session in one long turn past its idle limit is never drained. When
// its runtime's reports are refused (its RBAC taken away) during that
// turn, its last report, which says the turn is in flight, stands: a
// report is not judged by its age, and the session is still never culled.
// When the current pod moreover has no report of its own (status.runtime
// overwritten with another pod's, which the runtime cannot put back), the
// session shows Active=Unknown, reason RuntimeNotReporting, with a Warning
// Event, and is never culled. Once reports flow again, the runtime puts
// its report back, the turn ends and the session is culled as usual.
func TestBusyOrSilentSessionIsNeverCulled(t *testing.T) {
	ns, names, _ := setupTemplate(t, 1, idle(5*time.Second, 0),
		"--turns=1", "--turn-min=40s", "--turn-max=40s", "--think-max=0s", "--report-refresh=1s")
	name := names[0]
	eventually(t, 10*time.Second, "the long turn is reported", func() error {
		if r := session(t, ns, name).Status.Runtime; r == nil || r.ActiveTurns != 1 {
			return fmt.Errorf("report %+v", r)
		}
		return nil
	})
	notCulled := func() error {
		s := session(t, ns, name)
		if s.Status.Drain != nil || s.Spec.Suspend {
			return fmt.Errorf("culled: drain %+v suspend %v", s.Status.Drain, s.Spec.Suspend)
		}
		return nil
	}
	never(t, 8*time.Second, "a busy session past its idle limit is never drained", notCulled)

	undo := denyReports(t, ns, name)
	never(t, 5*time.Second, "a busy session whose runtime cannot write is never drained", notCulled)
	if c := meta.FindStatusCondition(session(t, ns, name).Status.Conditions, lullv1.ConditionActive); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Active = %+v with the runtime's own report of a turn standing, want True", c)
	}
	body := `{"status":{"runtime":{"podUID":"a-pod-long-gone","state":"Serving","activeTurns":0,"refreshSeconds":1}}}`
	if err := c.Status().Patch(context.Background(), &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, client.RawPatch(types.MergePatchType, []byte(body))); err != nil {
		t.Fatal(err)
	}
	eventually(t, 45*time.Second, "Active=Unknown RuntimeNotReporting", func() error {
		cond := meta.FindStatusCondition(session(t, ns, name).Status.Conditions, lullv1.ConditionActive)
		if cond == nil || cond.Status != metav1.ConditionUnknown || cond.Reason != "RuntimeNotReporting" {
			return fmt.Errorf("Active = %+v", cond)
		}
		return nil
	})
	never(t, 8*time.Second, "a session whose runtime does not report is never culled", notCulled)
	eventually(t, 10*time.Second, "a RuntimeNotReporting Warning Event", func() error {
		if n := eventCounts(t, ns, name)["RuntimeNotReporting"]; n != 1 {
			return fmt.Errorf("%d RuntimeNotReporting events", n)
		}
		return nil
	})
	undo()
	eventually(t, 90*time.Second, "reports flow again; the turn ends and the idle session is suspended", func() error {
		s := session(t, ns, name)
		if !s.Spec.Suspend {
			return fmt.Errorf("not suspended; Active %+v", meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionActive))
		}
		return nil
	})
}

// A turn begun while an idle drain is outstanding keeps the session: the
// agent refuses it (the runtime is sealed) but counts it as activity, the
// controller withdraws the request, the runtime reopens and the retried
// turn runs on the same pod. The runtime's Drained report is held back
// (reports refused) to hold the idle drain open long enough to try.
func TestTurnDuringIdleDrainKeepsTheSession(t *testing.T) {
	ns, names, before := setupTemplate(t, 1, all(withAgent(2*time.Second), idle(6*time.Second, 0)),
		"--turns=1", "--turn-min=100ms", "--turn-max=100ms", "--think-max=0s")
	name := names[0]
	uid := types.UID(before.Pods[name].UID)
	eventually(t, 20*time.Second, "the idle clock is shown", func() error {
		if l := session(t, ns, name).Status.Lifecycle; l == nil || l.IdleSince == nil {
			return fmt.Errorf("status.lifecycle %+v", l)
		}
		return nil
	})
	undo := denyReports(t, ns, name)
	var request string
	eventually(t, 20*time.Second, "an Idle drain request", func() error {
		d := session(t, ns, name).Status.Drain
		if d == nil || d.Reason != lullv1.DrainReasonIdle {
			return fmt.Errorf("drain %+v", d)
		}
		request = d.RequestID
		return nil
	})
	a := agentOf(t, uid)
	eventually(t, 10*time.Second, "the agent seals for the idle drain", func() error {
		code, body, err := a.do("POST", "/v1/turns")
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable {
			if code == http.StatusCreated {
				var tr struct{ ID string }
				_ = json.Unmarshal([]byte(body), &tr)
				_, _, _ = a.do("DELETE", "/v1/turns/"+tr.ID)
			}
			return fmt.Errorf("POST /v1/turns = %d %s", code, body)
		}
		return nil
	})
	undo()
	var turnID string
	eventually(t, 30*time.Second, "the idle drain is withdrawn and a turn accepted", func() error {
		code, body, err := a.do("POST", "/v1/turns")
		if err != nil {
			return err
		}
		if code != http.StatusCreated {
			return fmt.Errorf("POST /v1/turns = %d %s", code, body)
		}
		var tr struct{ ID string }
		if err := json.Unmarshal([]byte(body), &tr); err != nil {
			return err
		}
		turnID = tr.ID
		return nil
	})
	s := session(t, ns, name)
	if s.Spec.Suspend || s.Status.Replacement != nil || (s.Status.Drain != nil && s.Status.Drain.RequestID == request) {
		t.Fatalf("after the turn began: suspend %v replacement %+v drain %+v; want the idle drain withdrawn", s.Spec.Suspend, s.Status.Replacement, s.Status.Drain)
	}
	if p := pod(t, ns, name); p == nil || p.UID != uid {
		t.Fatal("the pod was replaced")
	}
	if code, _, err := a.do("DELETE", "/v1/turns/"+turnID); err != nil || code != http.StatusNoContent {
		t.Errorf("end turn: %d %v", code, err)
	}
	eventually(t, 10*time.Second, "one IdleCullWithdrawn Event", func() error {
		if n := eventCounts(t, ns, name)["IdleCullWithdrawn"]; n != 1 {
			return fmt.Errorf("%d IdleCullWithdrawn events, want 1", n)
		}
		return nil
	})
}

// Health checks, drain-state polls and the drain stream are not activity:
// polled for a while, the runtime's report is not written at all (an idle
// runtime writes nothing); POST /v1/activity (a user typing) moves its
// lastActivity, written within the 1s refresh.
func TestProbesAndPollsAreNotActivity(t *testing.T) {
	ns, names, before := setupTemplate(t, 1, withAgent(time.Second),
		"--turns=1", "--turn-min=100ms", "--turn-max=100ms", "--think-max=0s")
	name := names[0]
	a := agentOf(t, types.UID(before.Pods[name].UID))
	var first *lullv1.RuntimeReport
	eventually(t, 20*time.Second, "an idle report with activity", func() error {
		r := session(t, ns, name).Status.Runtime
		if r == nil || r.ActiveTurns != 0 || r.LastActivity == nil || r.ReportedAt == nil {
			return fmt.Errorf("report %+v", r)
		}
		first = r
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // a client following the drain stream throughout
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://agent/v1/drain/stream", nil)
		if resp, err := a.http.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	stop := time.Now().Add(5 * time.Second)
	for time.Now().Before(stop) {
		for _, path := range []string{"/healthz", "/v1/drain"} {
			if code, body, err := a.do("GET", path); err != nil || code != http.StatusOK {
				t.Fatalf("GET %s = %d %s %v", path, code, body, err)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	r := session(t, ns, name).Status.Runtime
	if !r.LastActivity.Equal(first.LastActivity) {
		t.Fatalf("lastActivity moved from %s to %s under probes and polls alone", first.LastActivity, r.LastActivity)
	}
	if !r.ReportedAt.Equal(first.ReportedAt) {
		t.Errorf("reportedAt moved from %s to %s under probes and polls alone: an idle runtime must write nothing", first.ReportedAt, r.ReportedAt)
	}
	if code, _, err := a.do("POST", "/v1/activity"); err != nil || code != http.StatusNoContent {
		t.Fatalf("POST /v1/activity = %d %v", code, err)
	}
	eventually(t, 10*time.Second, "POST /v1/activity moves lastActivity, within the refresh", func() error {
		if r := session(t, ns, name).Status.Runtime; !r.LastActivity.After(first.LastActivity.Time) {
			return fmt.Errorf("lastActivity %s", r.LastActivity)
		}
		return nil
	})
}

// A lastActivity in the future (clock skew, a forged report) counts as the
// moment it was first seen: the session is still culled once idle past its
// limit from then.
func TestFutureLastActivityDoesNotExempt(t *testing.T) {
	ns, names, before := setupTemplate(t, 1, idle(6*time.Second, 0),
		"--turns=1", "--turn-min=100ms", "--turn-max=100ms", "--think-max=0s", "--report-refresh=1s")
	name := names[0]
	uid := before.Pods[name].UID
	undo := denyReports(t, ns, name) // the runtime cannot put its own report back
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	forged := func() {
		now := time.Now().UTC().Format(time.RFC3339)
		body := fmt.Sprintf(`{"status":{"runtime":{"podUID":%q,"state":"Serving","activeTurns":0,"lastActivity":"2100-01-01T00:00:00Z","refreshSeconds":1,"reportedAt":%q}}}`, uid, now)
		_ = c.Status().Patch(ctx, &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, client.RawPatch(types.MergePatchType, []byte(body)))
	}
	forged()
	go func() { // a hostile runtime keeps its forged report fresh
		for ctx.Err() == nil {
			forged()
			time.Sleep(500 * time.Millisecond)
		}
	}()
	eventually(t, 30*time.Second, "an Idle drain despite lastActivity in 2100", func() error {
		if d := session(t, ns, name).Status.Drain; d == nil || d.Reason != lullv1.DrainReasonIdle {
			return fmt.Errorf("drain %+v", d)
		}
		return nil
	})
	cancel()
	undo()
	eventually(t, 60*time.Second, "suspended once the real runtime drains", func() error {
		if s := session(t, ns, name); s.Status.Phase != lullv1.SessionSuspended {
			return fmt.Errorf("phase %s", s.Status.Phase)
		}
		return nil
	})
}

// idle.deleteAfter drains the session, then deletes it; its claims follow
// the retention policy (whenDeleted Delete by default).
func TestIdleSessionIsDeleted(t *testing.T) {
	ns, names, _ := setupTemplate(t, 1, idle(0, 6*time.Second),
		"--turns=1", "--turn-min=100ms", "--turn-max=100ms", "--think-max=0s", "--report-refresh=1s")
	name := names[0]
	eventually(t, 40*time.Second, name+" deleted", func() error {
		err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &lullv1.Session{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("session still there: %v", err)
	})
	// The Event is recorded after the delete succeeded, and the recorder
	// posts it a moment later.
	eventually(t, 10*time.Second, "one IdleDelete Event", func() error {
		if n := eventCounts(t, ns, name)["IdleDelete"]; n != 1 {
			return fmt.Errorf("%d IdleDelete events, want 1", n)
		}
		return nil
	})
}

// maxLifetime restarts busy sessions, each drained first (no turn is
// interrupted: the auditor checks), within a wave of one.
func TestLifetimeRestartDrainsFirstWithinTheWave(t *testing.T) {
	one := intstr.FromInt32(1)
	ns, names, before := setupTemplate(t, 3, all(
		policy(lullv1.UpdatePolicy{Strategy: lullv1.UpdateStrategyDrain, MaxUnavailable: &one}),
		func(t *lullv1.SessionTemplate) { t.Spec.MaxLifetime = duration(time.Minute) }),
		"--turn-min=500ms", "--turn-max=2s", "--think-max=200ms", "--report-refresh=2s")
	w := watchWave(t, ns)
	sawLifetime := map[string]bool{}
	eventually(t, 3*time.Minute, "every pod replaced after its lifetime", func() error {
		for _, name := range names {
			s := session(t, ns, name)
			if d := s.Status.Drain; d != nil && d.Reason == lullv1.DrainReasonLifetime {
				sawLifetime[name] = true
			}
			if p := pod(t, ns, name); p == nil || string(p.UID) == before.Pods[name].UID || !meta.IsStatusConditionTrue(s.Status.Conditions, lullv1.ConditionReady) {
				return fmt.Errorf("%s not yet restarted", name)
			}
		}
		return nil
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.most > 1 {
		t.Errorf("%d sessions moving at once with maxUnavailable 1: %v", w.most, w.at)
	}
	if len(sawLifetime) == 0 {
		t.Error("no Lifetime drain request was seen")
	}
}
