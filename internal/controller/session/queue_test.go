package session

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// draining is a session whose runtime reports state for request
// "update-00000000000000a1" of pod "pod-a", at resourceVersion rv.
func draining(rv string, state lullv1.RuntimeState) *lullv1.Session {
	at := metav1.NewTime(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	return &lullv1.Session{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", ResourceVersion: rv},
		Status: lullv1.SessionStatus{
			PodUID: "pod-a",
			Drain:  &lullv1.DrainRequest{RequestID: "update-00000000000000a1", PodUID: "pod-a", Reason: lullv1.DrainReasonUpdate, RequestedAt: at},
			Runtime: &lullv1.RuntimeReport{PodUID: "pod-a", RequestID: "update-00000000000000a1", State: state,
				LastActivity: &at, ReportedAt: &at, RefreshSeconds: 30},
		},
	}
}

func TestNewlyDrained(t *testing.T) {
	drained := draining("2", lullv1.RuntimeDrained)
	cases := []struct {
		name     string
		old, cur *lullv1.Session
		want     bool
	}{
		{"Draining to Drained", draining("1", lullv1.RuntimeDraining), drained, true},
		{"no request before, Drained for the request now", func() *lullv1.Session {
			s := draining("1", lullv1.RuntimeServing)
			s.Status.Drain = nil
			s.Status.Runtime.RequestID = ""
			return s
		}(), drained, true},
		{"already Drained before", draining("1", lullv1.RuntimeDrained), drained, false},
		{"still Draining", draining("1", lullv1.RuntimeServing), draining("2", lullv1.RuntimeDraining), false},
		{"Drained for an older request", draining("1", lullv1.RuntimeDraining), func() *lullv1.Session {
			s := drained.DeepCopy()
			s.Status.Runtime.RequestID = "update-00000000000000a0"
			return s
		}(), false},
		{"Drained from another pod", draining("1", lullv1.RuntimeDraining), func() *lullv1.Session {
			s := drained.DeepCopy()
			s.Status.Runtime.PodUID = "pod-b"
			return s
		}(), false},
		{"request for another pod", draining("1", lullv1.RuntimeDraining), func() *lullv1.Session {
			s := drained.DeepCopy()
			s.Status.Drain.PodUID = "pod-b"
			return s
		}(), false},
		{"malformed: Drained with turns active", draining("1", lullv1.RuntimeDraining), func() *lullv1.Session {
			s := drained.DeepCopy()
			s.Status.Runtime.ActiveTurns = 1
			return s
		}(), false},
		{"request withdrawn", draining("1", lullv1.RuntimeDraining), func() *lullv1.Session {
			s := drained.DeepCopy()
			s.Status.Drain = nil
			return s
		}(), false},
		{"a new request answered: the old report answered the old one", drained, func() *lullv1.Session {
			s := drained.DeepCopy()
			s.ResourceVersion = "3"
			s.Status.Drain.RequestID, s.Status.Runtime.RequestID = "update-00000000000000a2", "update-00000000000000a2"
			return s
		}(), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := NewlyDrained(c.old, c.cur); got != c.want {
				t.Errorf("NewlyDrained = %v, want %v", got, c.want)
			}
		})
	}
}

func TestDecisionInputsSame(t *testing.T) {
	later := metav1.NewTime(time.Date(2026, 11, 30, 12, 0, 30, 0, time.UTC))
	rewrite := func(mut func(s *lullv1.Session)) *lullv1.Session {
		s := draining("2", lullv1.RuntimeDraining)
		s.Status.Runtime.ReportedAt = &later
		s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "lull-runtime", Time: &later}}
		if mut != nil {
			mut(s)
		}
		return s
	}
	cases := []struct {
		name     string
		old, cur *lullv1.Session
		want     bool
	}{
		{"only reportedAt and the entry's time moved: a runtime's start re-asserts its report", draining("1", lullv1.RuntimeDraining), rewrite(nil), false},
		{"only the managed fields moved", draining("1", lullv1.RuntimeDraining), func() *lullv1.Session {
			s := draining("2", lullv1.RuntimeDraining)
			s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Time: &later}}
			return s
		}(), true},
		{"resync: resourceVersion unchanged", draining("1", lullv1.RuntimeDraining), draining("1", lullv1.RuntimeDraining), false},
		{"state changed", draining("1", lullv1.RuntimeDraining), rewrite(func(s *lullv1.Session) { s.Status.Runtime.State = lullv1.RuntimeDrained }), false},
		{"a turn began", draining("1", lullv1.RuntimeDraining), rewrite(func(s *lullv1.Session) { s.Status.Runtime.ActiveTurns = 1 }), false},
		{"activity moved", draining("1", lullv1.RuntimeDraining), rewrite(func(s *lullv1.Session) { s.Status.Runtime.LastActivity = &later }), false},
		{"an expired turn counted", draining("1", lullv1.RuntimeDraining), rewrite(func(s *lullv1.Session) { s.Status.Runtime.ExpiredTurns = 1 }), false},
		{"refresh interval changed", draining("1", lullv1.RuntimeDraining), rewrite(func(s *lullv1.Session) { s.Status.Runtime.RefreshSeconds = 0 }), false},
		{"another pod reports", draining("1", lullv1.RuntimeDraining), rewrite(func(s *lullv1.Session) { s.Status.Runtime.PodUID = "pod-b" }), false},
		{"first report", func() *lullv1.Session { s := draining("1", lullv1.RuntimeDraining); s.Status.Runtime = nil; return s }(), rewrite(nil), false},
		{"the controller's status changed", draining("1", lullv1.RuntimeDraining), rewrite(func(s *lullv1.Session) { s.Status.Drain = nil }), false},
		{"an annotation changed", draining("1", lullv1.RuntimeDraining), rewrite(func(s *lullv1.Session) {
			s.Annotations = map[string]string{lullv1.AnnotationForceUpdate: "true"}
		}), false},
		{"the spec changed", draining("1", lullv1.RuntimeDraining), rewrite(func(s *lullv1.Session) { s.Spec.Suspend = true }), false},
		{"a report the controller judged stale is rewritten", func() *lullv1.Session {
			s := draining("1", lullv1.RuntimeDraining)
			s.Status.Conditions = []metav1.Condition{{Type: lullv1.ConditionActive, Status: metav1.ConditionUnknown, Reason: lullv1.ReasonRuntimeNotReporting}}
			return s
		}(), rewrite(func(s *lullv1.Session) {
			s.Status.Conditions = []metav1.Condition{{Type: lullv1.ConditionActive, Status: metav1.ConditionUnknown, Reason: lullv1.ReasonRuntimeNotReporting}}
		}), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := DecisionInputsSame(c.old, c.cur); got != c.want {
				t.Errorf("DecisionInputsSame = %v, want %v", got, c.want)
			}
			if got := decisionInputsChanged.Update(event.UpdateEvent{ObjectOld: c.old, ObjectNew: c.cur}); got == c.want {
				t.Errorf("decisionInputsChanged passes = %v, want %v", got, !c.want)
			}
		})
	}
}

// A Drained report is handed out before sessions queued earlier with the
// default priority; any other update keeps the default.
func TestSessionEventsPutDrainedFirst(t *testing.T) {
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	h := &sessionEvents{}
	ctx := context.Background()
	for _, name := range []string{"a", "b"} {
		old, cur := draining("1", lullv1.RuntimeServing), draining("2", lullv1.RuntimeDraining)
		old.Name, cur.Name = name, name
		h.Update(ctx, event.UpdateEvent{ObjectOld: old, ObjectNew: cur}, q)
	}
	old, cur := draining("1", lullv1.RuntimeDraining), draining("2", lullv1.RuntimeDrained)
	old.Name, cur.Name = "drained", "drained"
	h.Update(ctx, event.UpdateEvent{ObjectOld: old, ObjectNew: cur}, q)

	want := []struct {
		name     string
		priority int
	}{{"drained", DrainedPriority}, {"a", 0}, {"b", 0}}
	for _, w := range want {
		item, priority, _ := q.GetWithPriority()
		if item.Name != w.name || priority != w.priority {
			t.Errorf("got %s at priority %d, want %s at %d", item.Name, priority, w.name, w.priority)
		}
		q.Done(item)
	}
}

// Without a priority queue, a Drained report is added as any other event.
func TestSessionEventsPlainQueue(t *testing.T) {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	(&sessionEvents{}).Update(context.Background(), event.UpdateEvent{ObjectOld: draining("1", lullv1.RuntimeDraining), ObjectNew: draining("2", lullv1.RuntimeDrained)}, q)
	if item, _ := q.Get(); item.NamespacedName != (types.NamespacedName{Namespace: "ns", Name: "s"}) {
		t.Errorf("got %v, want ns/s", item)
	}
}

// Sessions newly admitted to the wave go ahead of sessions queued for a
// re-render, behind a Drained report; sessions admitted before are not
// enqueued again.
func TestAdmittedSessionsGoAhead(t *testing.T) {
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	ctx := context.Background()
	q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "rerender"}})
	old := &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "tpl", ResourceVersion: "1"},
		Status: lullv1.SessionTemplateStatus{Wave: []lullv1.WaveEntry{{Session: "before", Sequence: 1}}}}
	cur := old.DeepCopy()
	cur.ResourceVersion = "2"
	cur.Status.Wave = append(cur.Status.Wave, lullv1.WaveEntry{Session: "admitted", Sequence: 1})
	admittedSessions.Update(ctx, event.UpdateEvent{ObjectOld: old, ObjectNew: cur}, q)
	o, c := draining("1", lullv1.RuntimeDraining), draining("2", lullv1.RuntimeDrained)
	(&sessionEvents{}).Update(ctx, event.UpdateEvent{ObjectOld: o, ObjectNew: c}, q)

	for _, w := range []struct {
		name     string
		priority int
	}{{"s", DrainedPriority}, {"admitted", AdmittedPriority}, {"rerender", 0}} {
		item, priority, _ := q.GetWithPriority()
		if item.Name != w.name || priority != w.priority {
			t.Errorf("got %s at priority %d, want %s at %d", item.Name, priority, w.name, w.priority)
		}
		q.Done(item)
	}
	if n := q.Len(); n != 0 {
		t.Errorf("%d more items queued, want none (the session admitted before is not enqueued again)", n)
	}
}

func TestReplicaCountsOnly(t *testing.T) {
	base := func(rv string) *appsv1.StatefulSet {
		return &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", ResourceVersion: rv, Generation: 2, Labels: map[string]string{lullv1.LabelSession: "s"}},
			Spec:       appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1)},
			Status: appsv1.StatefulSetStatus{ObservedGeneration: 2, UpdateRevision: "rev-2", CurrentRevision: "rev-1",
				Replicas: 1, ReadyReplicas: 1, AvailableReplicas: 1, CurrentReplicas: 1},
		}
	}
	with := func(mut func(*appsv1.StatefulSet)) *appsv1.StatefulSet {
		s := base("2")
		mut(s)
		return s
	}
	cases := []struct {
		name string
		cur  *appsv1.StatefulSet
		want bool
	}{
		{"the pod went unready", with(func(s *appsv1.StatefulSet) { s.Status.ReadyReplicas, s.Status.AvailableReplicas = 0, 0 }), true},
		{"the new pod counted as updated", with(func(s *appsv1.StatefulSet) { s.Status.UpdatedReplicas, s.Status.CurrentReplicas = 1, 0 }), true},
		{"resync: same resourceVersion", base("1"), false},
		{"revision published", with(func(s *appsv1.StatefulSet) { s.Status.UpdateRevision = "rev-3" }), false},
		{"generation observed", with(func(s *appsv1.StatefulSet) { s.Status.ObservedGeneration = 1 }), false},
		{"current revision moved", with(func(s *appsv1.StatefulSet) { s.Status.CurrentRevision = "rev-2" }), false},
		{"spec edited", with(func(s *appsv1.StatefulSet) { s.Generation, s.Spec.Replicas = 3, ptr.To[int32](0) }), false},
		{"label removed", with(func(s *appsv1.StatefulSet) { s.Labels = nil }), false},
		{"owner reference dropped", with(func(s *appsv1.StatefulSet) { s.OwnerReferences = []metav1.OwnerReference{{Name: "x"}} }), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			old := base("1")
			if got := ReplicaCountsOnly(old, c.cur); got != c.want {
				t.Errorf("ReplicaCountsOnly = %v, want %v", got, c.want)
			}
			if got := statefulSetInputsChanged.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: c.cur}); got == c.want {
				t.Errorf("statefulSetInputsChanged passes = %v, want %v", got, !c.want)
			}
		})
	}
}

// The record of which drain request was given DrainedPriority goes with
// its Session: a deleted session's entry is dropped, so the map holds the
// sessions that exist, not every session that ever drained.
func TestSessionEventsForgetADeletedSession(t *testing.T) {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	h := &sessionEvents{}
	ctx := context.Background()
	old, cur := draining("1", lullv1.RuntimeDraining), draining("2", lullv1.RuntimeDrained)
	h.Update(ctx, event.UpdateEvent{ObjectOld: old, ObjectNew: cur}, q)
	if len(h.prioritized) != 1 {
		t.Fatalf("precondition: %d drained sessions recorded, want 1", len(h.prioritized))
	}
	h.Delete(ctx, event.DeleteEvent{Object: cur}, q)
	if len(h.prioritized) != 0 {
		t.Errorf("%d drained sessions still recorded after the Session was deleted", len(h.prioritized))
	}
}
