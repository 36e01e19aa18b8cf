package session

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/testenv"
	"lull.dev/lull/internal/render"
	"lull.dev/lull/internal/rollout"
)

// The fleet gauges, as a scrape exports them from the cache: sessions by
// template, revision, phase and state; drains by reason, 0 for every
// reason of every template; rollout progress as the template's status
// counts it.
func TestFleetGauges(t *testing.T) {
	tmpl := func(ns, name, image string) *lullv1.SessionTemplate {
		return &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: lullv1.SessionTemplateSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: lullv1.RuntimeContainerName, Image: image}}}}}}
	}
	agent, quiet := tmpl("ns", "agent", "example.com/agent:2"), tmpl("other", "quiet", "example.com/quiet:1")
	rev := render.TemplateRevision(agent)
	upToDate := func(status metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: lullv1.ConditionUpToDate, Status: status, Reason: "R"}
	}
	session := func(name, template string, edit func(s *lullv1.Session)) *lullv1.Session {
		s := &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: lullv1.SessionSpec{TemplateRef: lullv1.TemplateReference{Name: template}}}
		edit(s)
		return s
	}
	objs := []*lullv1.Session{
		session("current", "agent", func(s *lullv1.Session) {
			s.Status = lullv1.SessionStatus{Phase: lullv1.SessionRunning, TemplateRevision: rev,
				Conditions: []metav1.Condition{upToDate(metav1.ConditionTrue), {Type: lullv1.ConditionActive, Status: metav1.ConditionTrue, Reason: "TurnsInFlight"}}}
		}),
		session("draining", "agent", func(s *lullv1.Session) {
			s.Status = lullv1.SessionStatus{Phase: lullv1.SessionDraining, TemplateRevision: "old",
				Conditions: []metav1.Condition{upToDate(metav1.ConditionFalse)}, Drain: &lullv1.DrainRequest{RequestID: "x", Reason: lullv1.DrainReasonUpdate}}
		}),
		// Up to date by its condition, but on a revision the template has
		// moved past: stale, as the template's status counts it.
		session("behind", "agent", func(s *lullv1.Session) {
			s.Status = lullv1.SessionStatus{Phase: lullv1.SessionRunning, TemplateRevision: "old", Conditions: []metav1.Condition{upToDate(metav1.ConditionTrue)}}
		}),
		session("suspended", "agent", func(s *lullv1.Session) {
			s.Spec.Suspend = true
			s.Status = lullv1.SessionStatus{Phase: lullv1.SessionSuspended}
		}),
		session("new", "agent", func(s *lullv1.Session) {}),
		// Two sessions draining for node n1: one for the node alone, one
		// whose update drain the node drain reuses (counted once, under
		// its own reason).
		session("moving", "agent", func(s *lullv1.Session) {
			s.Status = lullv1.SessionStatus{Phase: lullv1.SessionDraining, TemplateRevision: rev,
				Conditions: []metav1.Condition{upToDate(metav1.ConditionTrue)}, Drain: &lullv1.DrainRequest{RequestID: "n", Reason: lullv1.DrainReasonNodeDrain, Node: "n1"}}
		}),
		session("reused", "agent", func(s *lullv1.Session) {
			s.Status = lullv1.SessionStatus{Phase: lullv1.SessionDraining, TemplateRevision: "old",
				Conditions: []metav1.Condition{upToDate(metav1.ConditionFalse)}, Drain: &lullv1.DrainRequest{RequestID: "u", Reason: lullv1.DrainReasonUpdate, Node: "n1"}}
		}),
		session("orphan", "gone", func(s *lullv1.Session) {
			s.Status = lullv1.SessionStatus{Phase: lullv1.SessionDraining, TemplateRevision: "r1", Drain: &lullv1.DrainRequest{RequestID: "y", Reason: lullv1.DrainReasonManual}}
		}),
	}
	sch := testenv.Scheme()
	b := fake.NewClientBuilder().WithScheme(sch).WithObjects(agent, quiet)
	for _, s := range objs {
		b = b.WithObjects(s)
	}
	elected := make(chan struct{})
	c := &fleetCollector{}
	c.use(b.Build(), elected)
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Errorf("a replica not elected exported %d fleet series, want none: the leader exports the fleet", n)
	}
	close(elected)

	want := fmt.Sprintf(`
# HELP lull_sessions %[1]s
# TYPE lull_sessions gauge
lull_sessions{namespace="ns",phase="Running",revision=%[2]q,state="Active",template="agent"} 1
lull_sessions{namespace="ns",phase="Draining",revision="old",state="Draining",template="agent"} 2
lull_sessions{namespace="ns",phase="Draining",revision=%[2]q,state="Draining",template="agent"} 1
lull_sessions{namespace="ns",phase="Running",revision="old",state="Unknown",template="agent"} 1
lull_sessions{namespace="ns",phase="Suspended",revision="",state="Suspended",template="agent"} 1
lull_sessions{namespace="ns",phase="Unknown",revision="",state="Unknown",template="agent"} 1
lull_sessions{namespace="ns",phase="Draining",revision="r1",state="Draining",template="gone"} 1
# HELP lull_drains_in_progress %[3]s
# TYPE lull_drains_in_progress gauge
lull_drains_in_progress{namespace="ns",reason="Update",template="agent"} 2
lull_drains_in_progress{namespace="ns",reason="Idle",template="agent"} 0
lull_drains_in_progress{namespace="ns",reason="Lifetime",template="agent"} 0
lull_drains_in_progress{namespace="ns",reason="Manual",template="agent"} 0
lull_drains_in_progress{namespace="ns",reason="NodeDrain",template="agent"} 1
lull_drains_in_progress{namespace="ns",reason="Manual",template="gone"} 1
lull_drains_in_progress{namespace="other",reason="Update",template="quiet"} 0
lull_drains_in_progress{namespace="other",reason="Idle",template="quiet"} 0
lull_drains_in_progress{namespace="other",reason="Lifetime",template="quiet"} 0
lull_drains_in_progress{namespace="other",reason="Manual",template="quiet"} 0
lull_drains_in_progress{namespace="other",reason="NodeDrain",template="quiet"} 0
# HELP lull_template_sessions_current %[4]s
# TYPE lull_template_sessions_current gauge
lull_template_sessions_current{namespace="ns",template="agent"} 2
lull_template_sessions_current{namespace="other",template="quiet"} 0
# HELP lull_template_sessions_stale %[5]s
# TYPE lull_template_sessions_stale gauge
lull_template_sessions_stale{namespace="ns",template="agent"} 4
# HELP lull_node_drains_in_progress %[6]s
# TYPE lull_node_drains_in_progress gauge
lull_node_drains_in_progress{node="n1"} 2
lull_template_sessions_stale{namespace="other",template="quiet"} 0
`, sessionsHelp, rev, drainsHelp, currentHelp, staleHelp, nodeDrainsHelp)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// The lifecycle state of lull_sessions is read from the Active condition
// rollout.NextStatus writes: both ends name the same reasons, so a session
// whose runtime reports turns counts as Active, one reporting none as Idle
// (with or without a refresh bound), one whose ready pod has no report of
// its own past the grace as NotReporting, and one whose pod has not yet
// had the time to report as Unknown.
func TestLifecycleStateReadsTheActiveReasonNextStatusWrites(t *testing.T) {
	const podUID = "pod-1"
	for _, tc := range []struct {
		name       string
		readyFor   time.Duration
		report     *lullv1.RuntimeReport
		wantState  string
		wantReason string
	}{
		{"turns in flight", time.Minute, &lullv1.RuntimeReport{PodUID: podUID, State: lullv1.RuntimeServing, ActiveTurns: 2, RefreshSeconds: 30}, "Active", lullv1.ReasonTurnsInFlight},
		{"no turn", time.Minute, &lullv1.RuntimeReport{PodUID: podUID, State: lullv1.RuntimeServing, RefreshSeconds: 30}, "Idle", lullv1.ReasonIdle},
		{"no turn, no refresh bound", time.Minute, &lullv1.RuntimeReport{PodUID: podUID, State: lullv1.RuntimeServing}, "Idle", lullv1.ReasonIdle},
		{"no report of its own past the grace", time.Minute, &lullv1.RuntimeReport{PodUID: "earlier-pod", State: lullv1.RuntimeServing}, "NotReporting", lullv1.ReasonRuntimeNotReporting},
		{"no report yet", time.Second, nil, "Unknown", lullv1.ReasonNoReport},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice-0", UID: podUID},
				Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
					{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(-tc.readyFor))}}}}
			s := &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice"}, Status: lullv1.SessionStatus{Runtime: tc.report}}
			o := rollout.Observed{Now: t0, Session: s, Pod: pod}
			s.Status = rollout.NextStatus(o, rollout.Judge(o), rollout.Action{Kind: rollout.Wait, Reason: lullv1.ReasonUpToDate})
			if got := conditionReason(s.Status.Conditions, lullv1.ConditionActive); got != tc.wantReason {
				t.Fatalf("Active reason = %q, want %q", got, tc.wantReason)
			}
			if got := LifecycleState(s); got != tc.wantState {
				t.Errorf("LifecycleState = %q, want %q", got, tc.wantState)
			}
		})
	}
}
