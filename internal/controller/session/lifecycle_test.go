package session

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// An idle session is deleted with its UID and the resourceVersion the
// decision was made on as preconditions, so a session resumed or edited
// between the decision and the delete is kept.
func TestIdleDeleteCarriesPreconditions(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, func(s *lullv1.Session, _ *corev1.Pod) {
		s.Spec.Suspend = true
		s.Status.Lifecycle = &lullv1.LifecycleStatus{IdleSince: &metav1.Time{Time: t0.Add(-time.Hour)}}
	})
	ctx := context.Background()
	tmpl := &lullv1.SessionTemplate{}
	if err := w.c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "agent"}, tmpl); err != nil {
		t.Fatal(err)
	}
	tmpl.Spec.Idle = &lullv1.IdlePolicy{DeleteAfter: &metav1.Duration{Duration: 30 * time.Minute}}
	if err := w.c.Update(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice-0"}}); err != nil {
		t.Fatal(err)
	}
	w.deletes = nil
	before := w.session()
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if len(w.deletes) != 1 {
		t.Fatalf("%d deletes, want the session's", len(w.deletes))
	}
	p := w.deletes[0].Preconditions
	if p == nil || p.UID == nil || *p.UID != before.UID || p.ResourceVersion == nil || *p.ResourceVersion != before.ResourceVersion {
		t.Fatalf("delete preconditions %+v, want UID %s and resourceVersion %s", p, before.UID, before.ResourceVersion)
	}
	if err := w.c.Get(ctx, w.key, &lullv1.Session{}); !apierrors.IsNotFound(err) {
		t.Fatalf("session after an idle delete: %v", err)
	}
	select {
	case e := <-w.events.Events:
		if want := "Normal IdleDelete"; len(e) < len(want) || e[:len(want)] != want {
			t.Errorf("event %q, want %s", e, want)
		}
	default:
		t.Error("no event for the idle delete")
	}
}

func TestReportWrittenAtIsTheServerTimeOfTheReportsOwner(t *testing.T) {
	at := func(m int) *metav1.Time { v := metav1.NewTime(t0.Add(time.Duration(m) * time.Minute)); return &v }
	s := &lullv1.Session{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{
		{Manager: "lull-controller", Subresource: "status", Time: at(9), FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:phase":{},"f:conditions":{}}}`)}},
		{Manager: "lull-runtime", Subresource: "status", Time: at(3), FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:runtime":{"f:state":{}}}}`)}},
		{Manager: "kubectl", Time: at(8), FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:annotations":{"f:runtime":{}}}}`)}},
	}}}
	if got := ReportWrittenAt(s); !got.Equal(at(3).Time) {
		t.Errorf("ReportWrittenAt = %s, want the runtime's entry (%s), not the controller's or an annotation named runtime", got, at(3))
	}
	if got := ReportWrittenAt(&lullv1.Session{}); !got.IsZero() {
		t.Errorf("no managed fields: %s, want zero", got)
	}
}

// An idle cull commits the drained pod and then suspends the session: the
// pod goes with the scale to zero, never by a delete of its own (which
// would only have the StatefulSet create a new pod, and the session never
// suspend).
func TestIdleCullSuspendsInsteadOfReplacing(t *testing.T) {
	idleSince := metav1.NewTime(t0.Add(-time.Hour))
	w := newWorld(t, interceptor.Funcs{}, func(s *lullv1.Session, pod *corev1.Pod) {
		pod.Labels["controller-revision-hash"] = "alice-new"
		req := &lullv1.DrainRequest{RequestID: "idle-0123456789abcdef", PodUID: "pod-1", Reason: lullv1.DrainReasonIdle, Sequence: 1, RequestedAt: metav1.NewTime(t0.Add(-time.Second))}
		s.Status.Drain, s.Status.DrainSequence = req, 1
		reported := metav1.NewTime(t0)
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: "pod-1", RequestID: req.RequestID, State: lullv1.RuntimeDrained,
			LastActivity: &idleSince, RefreshSeconds: 60, ReportedAt: &reported}
		s.Status.Lifecycle = &lullv1.LifecycleStatus{IdlePodUID: "pod-1", IdleSince: &idleSince, IdleActivity: &idleSince}
	})
	ctx := context.Background()
	tmpl := &lullv1.SessionTemplate{}
	if err := w.c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "agent"}, tmpl); err != nil {
		t.Fatal(err)
	}
	tmpl.Spec.Idle = &lullv1.IdlePolicy{SuspendAfter: &metav1.Duration{Duration: 30 * time.Minute}}
	if err := w.c.Update(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	s := w.session()
	if c := s.Status.Replacement; c == nil || c.RequestID != "idle-0123456789abcdef" {
		t.Fatalf("replacement %+v, want the idle drain committed", c)
	}
	if len(w.deletes) != 0 {
		t.Fatalf("the committed pod of an idle cull was deleted: %+v", w.deletes)
	}
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if s := w.session(); !s.Spec.Suspend {
		t.Fatal("the committed idle cull did not suspend the session")
	}
	if len(w.deletes) != 0 {
		t.Fatalf("pod deleted during the suspension: %+v", w.deletes)
	}
}
