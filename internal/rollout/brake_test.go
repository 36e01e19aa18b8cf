package rollout

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// onRevision is a session whose pod runs rev, Ready as given since age.
func onRevision(name, rev string, ready metav1.ConditionStatus, reason string, age time.Duration) lullv1.Session {
	s := lullv1.Session{ObjectMeta: metav1.ObjectMeta{Name: name}}
	s.Status.TemplateRevision = rev
	s.Status.Conditions = []metav1.Condition{{Type: lullv1.ConditionReady, Status: ready, Reason: reason, LastTransitionTime: metav1.NewTime(now.Add(-age))}}
	return s
}

func TestDecideBrake(t *testing.T) {
	const rev = "new"
	deadline := int32(60)
	base := func() *lullv1.SessionTemplate {
		return &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t"}, Spec: lullv1.SessionTemplateSpec{
			UpdatePolicy: lullv1.UpdatePolicy{ProgressDeadlineSeconds: &deadline}}}
	}
	ok := onRevision("ok", rev, metav1.ConditionTrue, "PodReady", time.Hour)
	crashing := onRevision("crashing", rev, metav1.ConditionFalse, lullv1.ReasonPodFailed, time.Second)
	slow := onRevision("slow", rev, metav1.ConditionFalse, "PodNotReady", 2*time.Minute)
	starting := onRevision("starting", rev, metav1.ConditionFalse, "PodNotReady", 20*time.Second)
	oldFailing := onRevision("old-failing", "old", metav1.ConditionFalse, lullv1.ReasonPodFailed, time.Hour)
	two := intstr.FromInt32(2)
	for _, tc := range []struct {
		name     string
		edit     func(t *lullv1.SessionTemplate)
		sessions []lullv1.Session
		paused   bool
		reason   string
		failing  string
		requeue  time.Duration
	}{
		{name: "healthy", sessions: []lullv1.Session{ok, starting, oldFailing}, reason: lullv1.ReasonProgressing, requeue: 40 * time.Second},
		{name: "one crash-looping session on the update revision stops it (default threshold 1)",
			sessions: []lullv1.Session{ok, crashing, oldFailing}, paused: true, reason: lullv1.ReasonFailureThreshold, failing: "crashing"},
		{name: "not Ready past the progress deadline counts as failed",
			sessions: []lullv1.Session{ok, slow}, paused: true, reason: lullv1.ReasonFailureThreshold, failing: "slow"},
		{name: "below a threshold of 2",
			edit:     func(t *lullv1.SessionTemplate) { t.Spec.UpdatePolicy.FailureThreshold = &two },
			sessions: []lullv1.Session{ok, crashing}, reason: lullv1.ReasonProgressing, failing: "crashing"},
		{name: "a stopped revision stays stopped after its failing pods recover",
			edit:     func(t *lullv1.SessionTemplate) { t.Status.PausedRevision = rev },
			sessions: []lullv1.Session{ok}, paused: true, reason: lullv1.ReasonFailureThreshold},
		{name: "a new revision releases the brake",
			edit:     func(t *lullv1.SessionTemplate) { t.Status.PausedRevision = "older" },
			sessions: []lullv1.Session{ok}, reason: lullv1.ReasonProgressing},
		{name: "lull rollout resume names the revision",
			edit: func(t *lullv1.SessionTemplate) {
				t.Status.PausedRevision = rev
				t.Annotations = map[string]string{lullv1.AnnotationResumeRollout: rev}
			}, sessions: []lullv1.Session{ok, crashing}, reason: lullv1.ReasonProgressing, failing: "crashing"},
		{name: "paused by hand", edit: func(t *lullv1.SessionTemplate) { t.Spec.UpdatePolicy.Paused = true },
			sessions: []lullv1.Session{ok}, paused: true, reason: lullv1.ReasonPaused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := base()
			if tc.edit != nil {
				tc.edit(tmpl)
			}
			b := DecideBrake(tmpl, rev, tc.sessions, now)
			if b.Paused != tc.paused || b.Reason != tc.reason || strings.Join(b.Failing, ",") != tc.failing {
				t.Errorf("brake = paused %v, %s, failing %v (%s); want paused %v, %s, failing %s", b.Paused, b.Reason, b.Failing, b.Message, tc.paused, tc.reason, tc.failing)
			}
			if b.Paused && tc.reason == lullv1.ReasonFailureThreshold && b.PausedRevision != rev {
				t.Errorf("pausedRevision = %q, want %q", b.PausedRevision, rev)
			}
			if b.RequeueAfter != tc.requeue {
				t.Errorf("RequeueAfter = %s, want %s", b.RequeueAfter, tc.requeue)
			}
		})
	}
}

func TestEffectivePolicy(t *testing.T) {
	tmpl := &lullv1.SessionTemplate{Spec: lullv1.SessionTemplateSpec{UpdatePolicy: lullv1.UpdatePolicy{Strategy: lullv1.UpdateStrategyPassive}}}
	if p := EffectivePolicy(tmpl, "r2"); p.Strategy != lullv1.UpdateStrategyPassive {
		t.Errorf("without break-glass: %+v", p)
	}
	tmpl.Spec.BreakGlass = &lullv1.BreakGlass{Revision: "r2", Reason: "CVE", Grace: metav1.Duration{Duration: 5 * time.Minute}}
	p := EffectivePolicy(tmpl, "r2")
	if p.Strategy != lullv1.UpdateStrategyDrain || p.DrainTimeout == nil || p.DrainTimeout.Duration != 5*time.Minute || p.OnDrainTimeout != lullv1.DrainTimeoutReplace {
		t.Errorf("break-glass for the revision: %+v, want Drain with a 5m deadline, then Replace", p)
	}
	if p := EffectivePolicy(tmpl, "r3"); p.Strategy != lullv1.UpdateStrategyPassive {
		t.Errorf("break-glass for an older revision applies to a later one: %+v", p)
	}
}
