package session

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
	"lull.dev/lull/internal/rollout"
)

const drainedNode = "kwok-node-1"

// onCordonedNode edits newWorld's session so its pod runs the update
// revision on node kwok-node-1, serving one turn; the node itself is
// created by cordon.
func onCordonedNode(s *lullv1.Session, pod *corev1.Pod) {
	pod.Labels[appsv1.ControllerRevisionHashLabelKey] = "alice-new"
	pod.Spec.NodeName = drainedNode
	s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, State: lullv1.RuntimeServing, ActiveTurns: 1}
}

// cordon creates node kwok-node-1, cordoned (unschedulable) or not.
func (w *world) cordon(unschedulable bool) {
	w.t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: drainedNode}}
	if err := w.c.Get(context.Background(), types.NamespacedName{Name: drainedNode}, node); apierrors.IsNotFound(err) {
		node.Spec.Unschedulable = unschedulable
		if err := w.c.Create(context.Background(), node); err != nil {
			w.t.Fatal(err)
		}
		return
	}
	node.Spec.Unschedulable = unschedulable
	if err := w.c.Update(context.Background(), node); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) budget() *policyv1.PodDisruptionBudget {
	w.t.Helper()
	pdb := &policyv1.PodDisruptionBudget{}
	if err := w.c.Get(context.Background(), w.key, pdb); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		w.t.Fatal(err)
	}
	return pdb
}

func (w *world) pod() *corev1.Pod {
	w.t.Helper()
	pod := &corev1.Pod{}
	if err := w.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "alice-0"}, pod); err != nil {
		w.t.Fatal(err)
	}
	return pod
}

func (w *world) setNodeDrainPolicy(p lullv1.NodeDrainPolicy) {
	w.t.Helper()
	tmpl := &lullv1.SessionTemplate{}
	if err := w.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "agent"}, tmpl); err != nil {
		w.t.Fatal(err)
	}
	tmpl.Spec.NodeDrainPolicy = p
	if err := w.c.Update(context.Background(), tmpl); err != nil {
		w.t.Fatal(err)
	}
}

// A session under the default policy (Drain) has a budget named as its
// StatefulSet, owned by the Session, maxUnavailable 0 over its pod unless
// the pod is labelled lull.dev/drained, unhealthyPodEvictionPolicy left
// to its default.
func TestSessionUnderDrainHasABudgetOverItsUndrainedPod(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, nil)
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	pdb := w.budget()
	if pdb == nil {
		t.Fatal("no PodDisruptionBudget")
	}
	if ref := metav1.GetControllerOf(pdb); ref == nil || ref.Kind != "Session" || ref.UID != "session-uid" {
		t.Errorf("controller %+v; want the Session", ref)
	}
	if pdb.Spec.MaxUnavailable == nil || *pdb.Spec.MaxUnavailable != intstr.FromInt32(0) || pdb.Spec.MinAvailable != nil || pdb.Spec.UnhealthyPodEvictionPolicy != nil {
		t.Errorf("spec %+v; want maxUnavailable 0 alone", pdb.Spec)
	}
	if got := metav1.FormatLabelSelector(pdb.Spec.Selector); got != "!lull.dev/drained,lull.dev/session=alice" {
		t.Errorf("selector %s; want the session's pod, not drained", got)
	}
	if got := w.eventReasons(); slices.Contains(got, lullv1.ReasonDriftCorrected) {
		t.Errorf("events %v: a first budget is no drift", got)
	}
}

// A budget deleted by another writer is created again, with a
// DriftCorrected Event; one edited is restored, with one too.
func TestBudgetDeletedOrEditedByHandIsPutBackWithAnEvent(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, nil)
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	w.eventReasons()
	if err := w.c.Delete(context.Background(), w.budget()); err != nil {
		t.Fatal(err)
	}
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if w.budget() == nil {
		t.Fatal("budget deleted by hand not created again")
	}
	if got := w.eventReasons(); !slices.Contains(got, lullv1.ReasonDriftCorrected) {
		t.Errorf("events %v; want DriftCorrected for the budget created again", got)
	}
	w.clock.SetTime(t0.Add(time.Hour)) // past any spacing of restores
	pdb := w.budget()
	one := intstr.FromInt32(1)
	pdb.Spec.MaxUnavailable = &one
	if err := w.c.Update(context.Background(), pdb); err != nil {
		t.Fatal(err)
	}
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if got := w.budget().Spec.MaxUnavailable; got == nil || *got != intstr.FromInt32(0) {
		t.Errorf("maxUnavailable %v after the restore; want 0", got)
	}
	if got := w.eventReasons(); !slices.Contains(got, lullv1.ReasonDriftCorrected) {
		t.Errorf("events %v; want DriftCorrected for the edited budget", got)
	}
}

// strategy Ignore: no budget; one left from Drain is deleted.
func TestIgnoreRemovesTheBudget(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, nil)
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if w.budget() == nil {
		t.Fatal("no budget under Drain")
	}
	w.setNodeDrainPolicy(lullv1.NodeDrainPolicy{Strategy: lullv1.NodeDrainStrategyIgnore})
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if w.budget() != nil {
		t.Fatal("budget kept under Ignore")
	}
}

// A cordoned node's session gets a NodeDrain request naming the node; it
// is not suspended, and its pod is not touched.
func TestCordonedNodeGetsItsSessionANodeDrainRequest(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, onCordonedNode)
	w.cordon(true)
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	s := w.session()
	d := s.Status.Drain
	if d == nil || d.Reason != lullv1.DrainReasonNodeDrain || d.Node != drainedNode || d.Deadline == nil {
		t.Fatalf("status.drain %+v; want a NodeDrain request naming %s with a deadline", d, drainedNode)
	}
	if s.Spec.Suspend || !w.podExists() || len(w.deletes) != 0 {
		t.Fatal("a node drain suspended the session or touched its pod")
	}
	// Uncordoned before the runtime drains: withdrawn.
	w.cordon(false)
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if s := w.session(); s.Status.Drain != nil {
		t.Fatalf("uncordoned: status.drain %+v; want none", s.Status.Drain)
	}
	if !w.podExists() || len(w.deletes) != 0 {
		t.Fatal("uncordoned: the pod was deleted")
	}
}

// Drained for a node drain: committed, then the pod is labelled for the
// node's drain instead of deleted; nobody evicts it, and lull deletes it
// once NodeDrainHandoff has passed.
func TestDrainedNodeDrainHandsThePodOffThenDeletesIt(t *testing.T) {
	var id string
	w := newWorld(t, interceptor.Funcs{}, func(s *lullv1.Session, pod *corev1.Pod) {
		onCordonedNode(s, pod)
		id = drain.RequestID(pod.UID, lullv1.DrainReasonNodeDrain, 1)
		deadline := metav1.NewTime(t0.Add(10 * time.Minute))
		s.Status.DrainSequence = 1
		s.Status.Drain = &lullv1.DrainRequest{RequestID: id, PodUID: pod.UID, Reason: lullv1.DrainReasonNodeDrain, Sequence: 1,
			RequestedAt: metav1.NewTime(t0.Add(-time.Minute)), Deadline: &deadline, Node: drainedNode}
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, RequestID: id, State: lullv1.RuntimeDrained}
	})
	w.cordon(true)
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if c := w.session().Status.Replacement; c == nil || c.Reason != lullv1.ReplacementDrained || c.RequestID != id {
		t.Fatalf("status.replacement %+v; want the Drained commitment of %s", c, id)
	}
	if len(w.deletes) != 0 || !w.podExists() {
		t.Fatal("the drained pod of a node being drained was deleted, not handed off")
	}
	pod := w.pod()
	if pod.Labels[lullv1.LabelDrained] != id || pod.Annotations[lullv1.AnnotationDrainedAt] != t0.Format(time.RFC3339) {
		t.Fatalf("pod labels %v annotations %v; want %s=%s and when", pod.Labels, pod.Annotations, lullv1.LabelDrained, id)
	}
	if got := w.eventReasons(); !slices.Contains(got, lullv1.ReasonDrained) {
		t.Errorf("events %v; want the hand-off's Drained", got)
	}
	// Within the hand-off: nothing more.
	w.clock.SetTime(t0.Add(5 * time.Second))
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if len(w.deletes) != 0 {
		t.Fatal("deleted within the hand-off")
	}
	// Past it, nobody evicted the pod: lull deletes it, UID precondition.
	w.clock.SetTime(t0.Add(rollout.NodeDrainHandoff + time.Second))
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if w.podExists() || len(w.deletes) != 1 || w.deletes[0].Preconditions == nil || *w.deletes[0].Preconditions.UID != w.podUID {
		t.Fatalf("deletes %+v; want the pod deleted with its UID precondition", w.deletes)
	}
}

// A Node's change reaches the sessions whose pods run on it.
func TestNodeMapsToTheSessionsOnIt(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, onCordonedNode)
	got := w.r.nodeToSessions(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: drainedNode}})
	if len(got) != 1 || got[0].NamespacedName != w.key {
		t.Fatalf("node %s maps to %v; want [%s]", drainedNode, got, w.key)
	}
	if got := w.r.nodeToSessions(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "other"}}); len(got) != 0 {
		t.Fatalf("another node maps to %v; want none", got)
	}
}

// Only a change of whether, or why, a node is disrupted passes.
func TestNodeEventsPassOnlyDisruptionChanges(t *testing.T) {
	plain := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	labelled := plain.DeepCopy()
	labelled.Labels = map[string]string{"x": "y"}
	cordoned := plain.DeepCopy()
	cordoned.Spec.Unschedulable = true
	for _, c := range []struct {
		name     string
		old, cur client.Object
		want     bool
	}{
		{"label churn", plain, labelled, false},
		{"cordoned", plain, cordoned, true},
		{"uncordoned", cordoned, plain, true},
	} {
		if got := nodeDisruptionChanged.Update(event.UpdateEvent{ObjectOld: c.old, ObjectNew: c.cur}); got != c.want {
			t.Errorf("%s: passes %t, want %t", c.name, got, c.want)
		}
	}
}

// A user's budget that also selects the session's pod is named in the
// BudgetsOverlap condition, with a Warning Event; lull's own budget of
// another session is not.
func TestUsersBudgetOverTheSessionPodIsNamed(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, onCordonedNode)
	w.cordon(false)
	everything := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "team-pdb"},
		Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{}}}
	other := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	for _, b := range []client.Object{everything, other} {
		if err := w.c.Create(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	// The pod is not Ready yet: its status is written once that has lasted.
	for _, at := range []time.Duration{0, SettleDelay + time.Second} {
		w.clock.SetTime(t0.Add(at))
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	s := w.session()
	c := meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionBudgetsOverlap)
	if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "team-pdb") || strings.Contains(c.Message, "web") {
		t.Fatalf("condition %+v; want BudgetsOverlap naming team-pdb alone", c)
	}
	if got := w.eventReasons(); !slices.Contains(got, lullv1.ReasonOverlappingBudgets) {
		t.Errorf("events %v; want OverlappingBudgets", got)
	}
	got := w.r.budgetToSessions(context.Background(), everything)
	if len(got) != 1 || got[0].NamespacedName != w.key {
		t.Errorf("team-pdb maps to %v; want [%s]", got, w.key)
	}
}
