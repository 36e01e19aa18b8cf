package rollout

import (
	"testing"
	"time"

	"lull.dev/lull/internal/render"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// An admission no drain request took up (its session moved on: its pod
// failed and was replaced at once, on the new revision) holds a place of
// the wave for UnusedAdmissionTTL, then is released and the next session
// admitted. Nothing else need happen in between: in a quiet fleet no
// session event recounts the template (a runtime's activity reports do not
// pass the template controller's sessionCounted, idle runtimes write
// nothing), so NextTemplateStatus must ask to look again when the
// admission lapses, or the session waiting behind it waits until the
// manager's resync (10 hours by default).
func TestWaveLooksAgainWhenAnUnusedAdmissionLapses(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	one := intstr.FromInt32(1)
	tmpl := &lullv1.SessionTemplate{Spec: lullv1.SessionTemplateSpec{
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: lullv1.RuntimeContainerName, Image: "i:2"}}}},
		UpdatePolicy: lullv1.UpdatePolicy{MaxUnavailable: &one},
	}}
	rev := render.TemplateRevision(tmpl)
	ready := metav1.Condition{Type: lullv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "PodReady", LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))}
	// a was admitted 30 s ago, then its stale pod failed and was replaced
	// without a drain: it runs the new revision, and never issues the
	// admitted request.
	a := lullv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Status: lullv1.SessionStatus{PodUID: "pod-a2", TemplateRevision: rev,
		Conditions: []metav1.Condition{ready, {Type: lullv1.ConditionUpToDate, Status: metav1.ConditionTrue, Reason: lullv1.ReasonUpToDate}}}}
	// b is stale and waits for the place.
	b := lullv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Status: lullv1.SessionStatus{PodUID: "pod-b", TemplateRevision: "old",
		Conditions: []metav1.Condition{ready, {Type: lullv1.ConditionUpToDate, Status: metav1.ConditionFalse, Reason: lullv1.ReasonWaitingForWave}}}}
	admittedAt := now.Add(-30 * time.Second)
	tmpl.Status.Wave = []lullv1.WaveEntry{{Session: "a", Sequence: 1, AdmittedAt: metav1.NewTime(admittedAt)}}

	st, requeue := NextTemplateStatus(tmpl, []lullv1.Session{a, b}, now, 0, false)
	if len(st.Wave) != 1 || st.Wave[0].Session != "a" {
		t.Fatalf("wave %+v, want a's admission still held (it is 30 s old)", st.Wave)
	}
	lapse := admittedAt.Add(UnusedAdmissionTTL)
	if requeue <= 0 || now.Add(requeue).Before(lapse) || now.Add(requeue).After(lapse.Add(2*time.Second)) {
		t.Fatalf("NextTemplateStatus asks to look again after %v; want just after a's admission lapses (%v from now), or b waits for a place that is free",
			requeue, lapse.Sub(now))
	}
	// At the look-again the reconciler revokes a's place on a (its
	// compare-and-swap lands: a took nothing up), then plans.
	if lapsed := PlacesToRevoke(tmpl.Status.Wave, []lullv1.Session{a, b}, now.Add(requeue)); len(lapsed) != 1 || lapsed[0].Session != "a" {
		t.Fatalf("lapsed at the look-again: %+v, want a's place", lapsed)
	}
	a.Status.RevokedAdmission = &lullv1.RevokedAdmission{Sequence: 1, AdmittedAt: metav1.NewTime(admittedAt)}
	st, _ = NextTemplateStatus(tmpl, []lullv1.Session{a, b}, now.Add(requeue), 0, false)
	if len(st.Wave) != 1 || st.Wave[0].Session != "b" {
		t.Errorf("wave at the look-again %+v, want b admitted in the place a never took up", st.Wave)
	}
}
