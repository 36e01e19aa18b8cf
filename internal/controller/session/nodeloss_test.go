package session

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
)

// lostNode creates node kwok-node-1 with its Ready condition Unknown
// (NodeStatusUnknown: the kubelet stopped posting status) since a minute
// before t0.
func (w *world) lostNode() {
	w.t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: drainedNode}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown", LastTransitionTime: metav1.NewTime(t0.Add(-time.Minute))}}}}
	if err := w.c.Create(context.Background(), node); err != nil {
		w.t.Fatal(err)
	}
}

// A busy session whose stale pod's node goes NotReady: its update drain
// is asked and waited for, the Ready condition names the node, its state
// and since when, the drain says its runtime cannot answer, and nothing
// is ever deleted (no force, no grace 0).
func TestBusySessionOnANotReadyNodeGetsTheConditionAndNoDelete(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, func(s *lullv1.Session, pod *corev1.Pod) {
		pod.Spec.NodeName = drainedNode
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, State: lullv1.RuntimeServing, ActiveTurns: 2}
	})
	w.lostNode()
	for i := range 3 {
		w.clock.SetTime(t0.Add(time.Duration(i) * time.Second))
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	if len(w.deletes) != 0 || !w.podExists() {
		t.Fatalf("deletes %+v; want none on a NotReady node", w.deletes)
	}
	s := w.session()
	c := meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionReady)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != lullv1.ReasonNodeLost {
		t.Fatalf("Ready %+v; want False NodeLost", c)
	}
	for _, want := range []string{"pod alice-0", "node " + drainedNode, "Ready=Unknown, NodeStatusUnknown", "since " + t0.Add(-time.Minute).UTC().Format(time.RFC3339), "never force-deletes"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("Ready message %q does not say %q", c.Message, want)
		}
	}
	if s.Status.Drain == nil {
		t.Fatal("no drain request: the stale pod's update drain was not asked")
	}
	if d := meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionDraining); d == nil || !strings.Contains(d.Message, "cannot answer: its node "+drainedNode+" is NotReady") {
		t.Errorf("Draining %+v does not say the runtime cannot answer", d)
	}
}

// A node deleted under a node drain (the live read finds no Node) does
// not read as "no longer being drained": the request is kept, nothing is
// deleted, and the session says the node is deleted.
func TestDeletedNodeIsNotANodeNoLongerDrained(t *testing.T) {
	var id string
	w := newWorld(t, interceptor.Funcs{}, func(s *lullv1.Session, pod *corev1.Pod) {
		onCordonedNode(s, pod)
		id = drain.RequestID(pod.UID, lullv1.DrainReasonNodeDrain, 1)
		deadline := metav1.NewTime(t0.Add(10 * time.Minute))
		s.Status.DrainSequence = 1
		s.Status.Drain = &lullv1.DrainRequest{RequestID: id, PodUID: pod.UID, Reason: lullv1.DrainReasonNodeDrain, Sequence: 1,
			RequestedAt: metav1.NewTime(t0.Add(-time.Minute)), Deadline: &deadline, Node: drainedNode}
	})
	// No Node object: kwok-node-1 is deleted.
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	s := w.session()
	if s.Status.Drain == nil || s.Status.Drain.RequestID != id {
		t.Fatalf("status.drain %+v; want %s kept", s.Status.Drain, id)
	}
	if len(w.deletes) != 0 || !w.podExists() {
		t.Fatalf("deletes %+v; want none", w.deletes)
	}
	for _, c := range s.Status.Conditions {
		if strings.Contains(c.Message, "no longer being drained") {
			t.Errorf("%s says %q", c.Type, c.Message)
		}
	}
	if c := meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionReady); c == nil || c.Reason != lullv1.ReasonNodeLost || !strings.Contains(c.Message, "which is deleted") {
		t.Errorf("Ready %+v; want NodeLost, the node deleted", c)
	}
}

// A node's Ready condition turning Unknown (or back) reaches its
// sessions; its heartbeats do not.
func TestNodeEventsPassReadinessChangesNotHeartbeats(t *testing.T) {
	ready := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.NewTime(t0)}}}}
	beat := ready.DeepCopy()
	beat.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(t0.Add(10 * time.Second))
	unknown := ready.DeepCopy()
	unknown.Status.Conditions[0].Status, unknown.Status.Conditions[0].Reason = corev1.ConditionUnknown, "NodeStatusUnknown"
	for _, c := range []struct {
		name     string
		old, cur client.Object
		want     bool
	}{
		{"heartbeat", ready, beat, false},
		{"Ready Unknown", ready, unknown, true},
		{"Ready again", unknown, ready, true},
	} {
		if got := nodeDisruptionChanged.Update(event.UpdateEvent{ObjectOld: c.old, ObjectNew: c.cur}); got != c.want {
			t.Errorf("%s: passes %t, want %t", c.name, got, c.want)
		}
	}
}
