package template

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

func TestTemplateInputsChanged(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	base := func(rv string) *lullv1.Session {
		return &lullv1.Session{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", ResourceVersion: rv},
			Spec:       lullv1.SessionSpec{TemplateRef: lullv1.TemplateReference{Name: "tpl"}},
			Status: lullv1.SessionStatus{PodUID: "pod-a", TemplateRevision: "rev-1",
				Drain:   &lullv1.DrainRequest{RequestID: "update-00000000000000a1", PodUID: "pod-a", Reason: lullv1.DrainReasonUpdate, RequestedAt: at},
				Runtime: &lullv1.RuntimeReport{PodUID: "pod-a", State: lullv1.RuntimeServing, ReportedAt: &at, RefreshSeconds: 30}},
		}
	}
	with := func(mut func(*lullv1.Session)) *lullv1.Session {
		s := base("2")
		mut(s)
		return s
	}
	later := metav1.NewTime(at.Add(time.Minute))
	cases := []struct {
		name string
		cur  *lullv1.Session
		want bool
	}{
		{"the runtime reports Draining", with(func(s *lullv1.Session) {
			s.Status.Runtime.State, s.Status.Runtime.RequestID = lullv1.RuntimeDraining, "update-00000000000000a1"
		}), false},
		{"the runtime reports Drained", with(func(s *lullv1.Session) {
			s.Status.Runtime.State, s.Status.Runtime.RequestID = lullv1.RuntimeDrained, "update-00000000000000a1"
		}), false},
		{"the report is rewritten", with(func(s *lullv1.Session) { s.Status.Runtime.ReportedAt = &later }), false},
		{"activity moved, still idle", with(func(s *lullv1.Session) { s.Status.Runtime.LastActivity = &later }), false},
		{"a turn began: no longer idle", with(func(s *lullv1.Session) { s.Status.Runtime.ActiveTurns = 1 }), true},
		{"another pod reports", with(func(s *lullv1.Session) { s.Status.Runtime.PodUID = "pod-b" }), true},
		{"the report is gone", with(func(s *lullv1.Session) { s.Status.Runtime = nil }), true},
		{"the controller's status moved", with(func(s *lullv1.Session) { s.Status.TemplateRevision = "rev-2" }), true},
		{"the drain request withdrawn", with(func(s *lullv1.Session) { s.Status.Drain = nil }), true},
		{"suspended", with(func(s *lullv1.Session) { s.Spec.Suspend = true }), true},
		{"being deleted", with(func(s *lullv1.Session) { s.DeletionTimestamp = &later }), true},
		{"resync: same resourceVersion", base("1"), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			old := base("1")
			if got := TemplateInputsChanged(old, c.cur); got != c.want {
				t.Errorf("TemplateInputsChanged = %v, want %v", got, c.want)
			}
			if got := sessionCounted.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: c.cur}); got != c.want {
				t.Errorf("sessionCounted passes = %v, want %v", got, c.want)
			}
		})
	}
	busy := base("1")
	busy.Status.Runtime.ActiveTurns = 1
	busier := busy.DeepCopy()
	busier.ResourceVersion, busier.Status.Runtime.ActiveTurns = "2", 3
	if TemplateInputsChanged(busy, busier) {
		t.Error("1 turn to 3 turns counted as a change; the template reads only whether the runtime is idle")
	}
}
