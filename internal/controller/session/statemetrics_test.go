package session

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/render"
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
		session("orphan", "gone", func(s *lullv1.Session) {
			s.Status = lullv1.SessionStatus{Phase: lullv1.SessionDraining, TemplateRevision: "r1", Drain: &lullv1.DrainRequest{RequestID: "y", Reason: lullv1.DrainReasonManual}}
		}),
	}
	sch := runtime.NewScheme()
	if err := lullv1.AddToScheme(sch); err != nil {
		t.Fatal(err)
	}
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
lull_sessions{namespace="ns",phase="Draining",revision="old",state="Draining",template="agent"} 1
lull_sessions{namespace="ns",phase="Running",revision="old",state="Unknown",template="agent"} 1
lull_sessions{namespace="ns",phase="Suspended",revision="",state="Suspended",template="agent"} 1
lull_sessions{namespace="ns",phase="Unknown",revision="",state="Unknown",template="agent"} 1
lull_sessions{namespace="ns",phase="Draining",revision="r1",state="Draining",template="gone"} 1
# HELP lull_drains_in_progress %[3]s
# TYPE lull_drains_in_progress gauge
lull_drains_in_progress{namespace="ns",reason="Update",template="agent"} 1
lull_drains_in_progress{namespace="ns",reason="Idle",template="agent"} 0
lull_drains_in_progress{namespace="ns",reason="Lifetime",template="agent"} 0
lull_drains_in_progress{namespace="ns",reason="Manual",template="agent"} 0
lull_drains_in_progress{namespace="ns",reason="Manual",template="gone"} 1
lull_drains_in_progress{namespace="other",reason="Update",template="quiet"} 0
lull_drains_in_progress{namespace="other",reason="Idle",template="quiet"} 0
lull_drains_in_progress{namespace="other",reason="Lifetime",template="quiet"} 0
lull_drains_in_progress{namespace="other",reason="Manual",template="quiet"} 0
# HELP lull_template_sessions_current %[4]s
# TYPE lull_template_sessions_current gauge
lull_template_sessions_current{namespace="ns",template="agent"} 1
lull_template_sessions_current{namespace="other",template="quiet"} 0
# HELP lull_template_sessions_stale %[5]s
# TYPE lull_template_sessions_stale gauge
lull_template_sessions_stale{namespace="ns",template="agent"} 3
lull_template_sessions_stale{namespace="other",template="quiet"} 0
`, sessionsHelp, rev, drainsHelp, currentHelp, staleHelp)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
