package rollout

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// changes reports whether a deletes or commits anything.
func changes(a Action) bool { return a.Kind == Commit || a.Kind == DeletePod || a.Kind == HandOff }

// notReady sets the Ready condition of n to status (False or Unknown)
// with reason, since at.
func notReady(n *corev1.Node, status corev1.ConditionStatus, reason string, at time.Time) {
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: reason, LastTransitionTime: metav1.NewTime(at)}}
}

func TestNodeLostNamesTheStateTheReasonAndSinceWhen(t *testing.T) {
	since := now.Add(-3 * time.Minute)
	bound := &corev1.Pod{Spec: corev1.PodSpec{NodeName: nodeName}}
	node := func(status corev1.ConditionStatus, reason string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}
		if status != "" {
			notReady(n, status, reason, since)
		}
		return n
	}
	for _, c := range []struct {
		name  string
		node  *corev1.Node
		pod   *corev1.Pod
		gone  bool
		lost  bool
		state string
	}{
		{"ready", node(corev1.ConditionTrue, "KubeletReady"), bound, false, false, ""},
		{"no Ready condition yet", node("", ""), bound, false, false, ""},
		{"unknown", node(corev1.ConditionUnknown, "NodeStatusUnknown"), bound, false, true, "NotReady (Ready=Unknown, NodeStatusUnknown) since " + since.UTC().Format(time.RFC3339)},
		{"false", node(corev1.ConditionFalse, "KubeletNotReady"), bound, false, true, "NotReady (Ready=False, KubeletNotReady) since " + since.UTC().Format(time.RFC3339)},
		{"deleted (live NotFound)", nil, bound, true, true, "deleted"},
		{"not cached, not confirmed gone", nil, bound, false, false, ""},
		{"pod not scheduled", nil, &corev1.Pod{}, true, false, ""},
		{"no pod", node(corev1.ConditionUnknown, "NodeStatusUnknown"), nil, false, false, ""},
	} {
		l, lost := NodeLost(c.node, c.pod, c.gone)
		if lost != c.lost || (lost && (l.State() != c.state || l.Node != nodeName)) {
			t.Errorf("%s: lost %v %q on %q; want %v %q", c.name, lost, l.State(), l.Node, c.lost, c.state)
		}
	}
}

// A busy session whose node goes NotReady: lull deletes nothing, the
// Ready condition names the pod, the node, its state and the manual step.
func TestBusySessionOnANotReadyNodeIsNamedNotTouched(t *testing.T) {
	f := onNode()
	f.o.Node.Spec.Unschedulable = false
	notReady(f.o.Node, corev1.ConditionUnknown, "NodeStatusUnknown", now.Add(-time.Minute))
	a := decide(f.o)
	if changes(a) {
		t.Fatalf("node NotReady under a busy session: %s/%s; want nothing deleted or committed", a.Kind, a.Reason)
	}
	st := nextStatus(f.o, a)
	c := findCondition(st.Conditions, lullv1.ConditionReady)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != lullv1.ReasonNodeLost {
		t.Fatalf("Ready condition %+v; want False NodeLost", c)
	}
	for _, want := range []string{"pod s-0", "node " + nodeName, "Ready=Unknown, NodeStatusUnknown", "since " + now.Add(-time.Minute).UTC().Format(time.RFC3339),
		"never force-deletes", "kubectl delete node " + nodeName, "docs/operations.md#a-node-lost"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("Ready message %q does not say %q", c.Message, want)
		}
	}
}

// An update drain outstanding on a pod whose node is NotReady does not
// wait in silence: UpToDate and Draining say its runtime cannot answer,
// and why; the note is stable, so the wait costs no status write.
func TestDrainOnALostNodeSaysTheRuntimeCannotAnswer(t *testing.T) {
	f := onNode()
	f.o.Node.Spec.Unschedulable = false
	notReady(f.o.Node, corev1.ConditionFalse, "KubeletNotReady", now.Add(-time.Minute))
	f.o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = oldRev
	f.o.Admitted = true
	outstanding(&f.o, requested(podUID, newRev, 1, now.Add(-time.Minute)))
	a := decide(f.o)
	if changes(a) || a.Drain == nil {
		t.Fatalf("update drain on a NotReady node: %s/%s drain %+v; want the wait, nothing deleted", a.Kind, a.Reason, a.Drain)
	}
	st := nextStatus(f.o, a)
	for _, typ := range []string{lullv1.ConditionUpToDate, lullv1.ConditionDraining} {
		c := findCondition(st.Conditions, typ)
		if c == nil || !strings.Contains(c.Message, "cannot answer: its node "+nodeName+" is NotReady (Ready=False, KubeletNotReady)") {
			t.Errorf("%s condition %+v does not say the runtime cannot answer", typ, c)
		}
	}
	f.o.Session.Status = st
	again := nextStatus(f.o, decide(f.o))
	for _, typ := range []string{lullv1.ConditionReady, lullv1.ConditionUpToDate, lullv1.ConditionDraining} {
		if a, b := findCondition(st.Conditions, typ), findCondition(again.Conditions, typ); a.Message != b.Message || a.Reason != b.Reason {
			t.Errorf("the next reconcile rewrites %s:\n%s\n%s", typ, a.Message, b.Message)
		}
	}
}

// A node deleted under an outstanding node drain is not "no longer being
// drained": the request is kept, nothing deleted, and the messages say the
// node is deleted.
func TestNodeDeletedUnderANodeDrainIsNotAWithdrawal(t *testing.T) {
	f := onNode()
	req := nodeDrain(1, now.Add(-time.Minute))
	outstanding(&f.o, req)
	f.o.Node, f.o.NodeGone = nil, true
	a := decide(f.o)
	if changes(a) || a.Drain == nil || a.Drain.RequestID != req.RequestID {
		t.Fatalf("node deleted: %s/%s drain %+v; want request %s kept, nothing deleted", a.Kind, a.Reason, a.Drain, req.RequestID)
	}
	if NodeDrainWithdrawn(f.o, a) {
		t.Error("a node deleted is reported as a withdrawn node drain")
	}
	st := nextStatus(f.o, a)
	for _, c := range st.Conditions {
		if strings.Contains(c.Message, "no longer being drained") {
			t.Errorf("%s says %q", c.Type, c.Message)
		}
	}
	if c := findCondition(st.Conditions, lullv1.ConditionDraining); c == nil || !strings.Contains(c.Message, "node "+nodeName+" is deleted") {
		t.Errorf("Draining %+v does not say the node is deleted", c)
	}
	if c := findCondition(st.Conditions, lullv1.ConditionReady); c == nil || c.Reason != lullv1.ReasonNodeLost || !strings.Contains(c.Message, "which is deleted") {
		t.Errorf("Ready %+v; want NodeLost naming the node deleted", c)
	}
	for _, ev := range Events(f.o, st, a) {
		if ev.Type == corev1.EventTypeNormal && ev.Reason == lullv1.ReasonNodeDrain {
			t.Errorf("event %+v: a deleted node reads as a withdrawal", ev)
		}
	}
}

// A node the cache does not hold but whose deletion no live read
// confirmed is not lost: nothing is said of it, and an uncordon-like
// withdrawal keeps its words.
func TestUnconfirmedNodeIsNotLost(t *testing.T) {
	f := onNode()
	f.o.Node = nil
	st := nextStatus(f.o, decide(f.o))
	if c := findCondition(st.Conditions, lullv1.ConditionReady); c == nil || c.Reason == lullv1.ReasonNodeLost {
		t.Errorf("Ready %+v; want no NodeLost on the cache alone", c)
	}
}
