package rollout

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// The Passive convergence window is "the latest, over its stale running
// sessions, of each one's earliest cullAt and lifetimeDeadline", and a
// session that will not move by either is counted in withoutDeadline with
// no completion time given. A lifetime deadline moves nothing when the
// lifetime restart cannot be started: the runtime does not report (lifetime
// drains wait for a report), or the rollout is paused (no place in the wave
// is given). The template must not publish a completion time made of such a
// deadline.
func TestPassiveCompletionIsOnlyWhatThePolicyCanMeet(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	tmpl := &lullv1.SessionTemplate{Spec: lullv1.SessionTemplateSpec{
		UpdatePolicy: lullv1.UpdatePolicy{Strategy: lullv1.UpdateStrategyPassive},
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: lullv1.RuntimeContainerName, Image: "i:2"}}}}}}
	at := func(d time.Duration) *metav1.Time { v := metav1.NewTime(now.Add(d)); return &v }
	stale := func(name string, active metav1.ConditionStatus, activeReason string, l lullv1.LifecycleStatus) lullv1.Session {
		s := lullv1.Session{ObjectMeta: metav1.ObjectMeta{Name: name}}
		s.Status.TemplateRevision, s.Status.PodUID = "old", k8stypes.UID("p-"+name)
		s.Status.Lifecycle = &l
		s.Status.Conditions = []metav1.Condition{
			{Type: lullv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "PodReady", LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))},
			{Type: lullv1.ConditionUpToDate, Status: metav1.ConditionFalse, Reason: lullv1.ReasonUpdatePending},
			{Type: lullv1.ConditionActive, Status: active, Reason: activeReason},
		}
		return s
	}
	busy := stale("busy", metav1.ConditionTrue, "TurnsInFlight", lullv1.LifecycleStatus{LifetimeDeadline: at(time.Hour)})
	silent := stale("silent", metav1.ConditionUnknown, lullv1.ReasonRuntimeNotReporting, lullv1.LifecycleStatus{LifetimeDeadline: at(2 * time.Hour)})
	idle := stale("idle", metav1.ConditionFalse, "Idle", lullv1.LifecycleStatus{IdleSince: at(-time.Minute), CullAction: lullv1.IdleSuspend,
		CullAt: at(3 * time.Hour), LifetimeDeadline: at(4 * time.Hour)})

	st, _ := NextTemplateStatus(tmpl, []lullv1.Session{busy, idle}, now, 0, false)
	if st.ExpectedCompletion == nil || !st.ExpectedCompletion.Time.Equal(now.Add(3*time.Hour)) || st.WithoutDeadline != 0 {
		t.Fatalf("precondition: expectedCompletion %v withoutDeadline %d; want now+3h, 0", st.ExpectedCompletion, st.WithoutDeadline)
	}

	st, _ = NextTemplateStatus(tmpl, []lullv1.Session{busy, silent, idle}, now, 0, false)
	if st.ExpectedCompletion != nil || st.WithoutDeadline != 1 {
		t.Errorf("a stale session whose runtime does not report (its lifetime restart waits for a report): expectedCompletion %v withoutDeadline %d; "+
			"want no completion time and 1 without deadline", st.ExpectedCompletion, st.WithoutDeadline)
	}

	paused := tmpl.DeepCopy()
	paused.Spec.UpdatePolicy.Paused = true
	st, _ = NextTemplateStatus(paused, []lullv1.Session{busy, idle}, now, 0, false)
	if st.ExpectedCompletion != nil || st.WithoutDeadline != 1 {
		t.Errorf("paused: a busy session moves only by its lifetime restart, which waits for a place no paused rollout gives: "+
			"expectedCompletion %v withoutDeadline %d; want none and 1", st.ExpectedCompletion, st.WithoutDeadline)
	}
	st, _ = NextTemplateStatus(paused, []lullv1.Session{idle}, now, 0, false)
	if st.ExpectedCompletion == nil || !st.ExpectedCompletion.Time.Equal(now.Add(3*time.Hour)) {
		t.Errorf("paused: an idle cull needs no place: expectedCompletion %v, want its cullAt, now+3h", st.ExpectedCompletion)
	}
}
