package rollout

import (
	"testing"
	"time"

	"lull.dev/lull/internal/render"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// TestNextTemplateStatus checks how the policy shapes a template's status:
// stale sessions admitted to the wave with an expected completion, none
// admitted while paused or under Passive.
func TestNextTemplateStatus(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	tmpl := &lullv1.SessionTemplate{Spec: lullv1.SessionTemplateSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: lullv1.RuntimeContainerName, Image: "i:2"}}}}}}
	rev := render.TemplateRevision(tmpl)
	stale := func(name string) lullv1.Session {
		s := lullv1.Session{ObjectMeta: metav1.ObjectMeta{Name: name}}
		s.Status.TemplateRevision = "old"
		s.Status.PodUID = "p-" + "x"
		s.Status.Conditions = []metav1.Condition{
			{Type: lullv1.ConditionReady, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))},
			{Type: lullv1.ConditionUpToDate, Status: metav1.ConditionFalse, Reason: "Draining"},
		}
		return s
	}
	sessions := []lullv1.Session{stale("a"), stale("b"), stale("c"), stale("d"), stale("e")}

	st, _ := NextTemplateStatus(tmpl, sessions, now, 30*time.Second, true)
	if len(st.Wave) != 1 { // 25% of 5, at least 1
		t.Errorf("wave = %v, want 1 admitted", st.Wave)
	}
	if st.ExpectedCompletion == nil || !st.ExpectedCompletion.Equal(&metav1.Time{Time: now.Add(5 * 30 * time.Second)}) {
		t.Errorf("expectedCompletion = %v, want now + 5 waves of 30s", st.ExpectedCompletion)
	}
	if st.Revision != rev {
		t.Errorf("revision = %s, want %s", st.Revision, rev)
	}

	paused := tmpl.DeepCopy()
	paused.Spec.UpdatePolicy.Paused = true
	st, _ = NextTemplateStatus(paused, sessions, now, 30*time.Second, true)
	if len(st.Wave) != 0 || st.ExpectedCompletion != nil || !meta.IsStatusConditionTrue(st.Conditions, lullv1.ConditionRolloutPaused) {
		t.Errorf("paused: wave %v, expected %v, conditions %v; want nobody admitted, no estimate, RolloutPaused", st.Wave, st.ExpectedCompletion, st.Conditions)
	}

	passive := tmpl.DeepCopy()
	passive.Spec.UpdatePolicy.Strategy = lullv1.UpdateStrategyPassive
	st, _ = NextTemplateStatus(passive, sessions, now, 30*time.Second, true)
	if len(st.Wave) != 0 || st.ExpectedCompletion != nil {
		t.Errorf("Passive: wave %v, expected %v; want none (sessions move when replaced for another reason)", st.Wave, st.ExpectedCompletion)
	}
}
