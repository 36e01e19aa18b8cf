package session

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"sync/atomic"
	"time"

	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
	"lull.dev/lull/internal/rollout"
)

// While a session pod has not drained, no eviction of it succeeds. A
// second writer (a user, another controller) labels a live, busy pod
// lull.dev/drained by hand: nothing is committed for it, its runtime
// holds a turn, its node is not disrupted. The budget's selector excludes
// the label, so the Eviction API now finds no budget over the pod and
// evicts it under its turn. lull must take the pod back under its budget
// (remove the label it did not set, or otherwise keep the budget over
// it); it does neither: the label stays and the budget selects nothing.
func TestPodLabelledDrainedByHandWithoutACommitmentStaysUnderItsBudget(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, func(s *lullv1.Session, pod *corev1.Pod) {
		onCordonedNode(s, pod) // busy: one active turn
		pod.Labels[lullv1.LabelDrained] = "by-hand"
	})
	w.cordon(false) // the node is not being drained
	for range 2 {
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	if c := w.session().Status.Replacement; c != nil {
		t.Fatalf("status.replacement %+v; the scenario has no commitment", c)
	}
	pdb := w.budget()
	if pdb == nil {
		t.Fatal("no budget")
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if pod := w.pod(); !sel.Matches(labels.Set(pod.Labels)) {
		t.Errorf("pod labels %v: budget %s does not cover the busy, uncommitted pod, so an eviction of it succeeds under its turn",
			pod.Labels, metav1.FormatLabelSelector(pdb.Spec.Selector))
	}
}

// Uncordon before Drained withdraws the request; nothing deleted. The
// node is uncordoned while the NodeDrain request is outstanding; the
// Node cache lags (it still shows the node cordoned) when the runtime's
// Drained report arrives. lull commits the replacement on the stale
// cordon and hands the pod off (deleted by lull 15 s later): a pod moved
// for a drain that had been called off before its runtime answered. The
// commit is destructive, yet the one fact it rests on that the Session's
// compare-and-swap does not cover, the node's disruption, is read only
// from the cache; a live read of the Node before a NodeDrain commitment
// (as lull reads live elsewhere before a destructive step) would see the
// uncordon and withdraw.
func TestUncordonBeforeDrainedWithdrawsEvenWhenTheNodeCacheLags(t *testing.T) {
	var live atomic.Bool
	var cached atomic.Pointer[corev1.Node]
	cached.Store(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: drainedNode}, Spec: corev1.NodeSpec{Unschedulable: true}})
	w := newWorld(t, interceptor.Funcs{Get: laggingGet[corev1.Node](&live, &cached)}, func(s *lullv1.Session, pod *corev1.Pod) {
		onCordonedNode(s, pod)
		id := drain.RequestID(pod.UID, lullv1.DrainReasonNodeDrain, 1)
		deadline := metav1.NewTime(t0.Add(10 * time.Minute))
		s.Status.DrainSequence = 1
		s.Status.Drain = &lullv1.DrainRequest{RequestID: id, PodUID: pod.UID, Reason: lullv1.DrainReasonNodeDrain, Sequence: 1,
			RequestedAt: metav1.NewTime(t0.Add(-time.Minute)), Deadline: &deadline, Node: drainedNode}
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, RequestID: id, State: lullv1.RuntimeDrained}
	})
	w.r.APIReader = liveReader{c: w.c, live: &live} // the API server does not lag
	live.Store(true)
	w.cordon(false) // uncordoned in the API server, before the Drained report is seen
	live.Store(false)
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if c := w.session().Status.Replacement; c != nil {
		t.Errorf("status.replacement %+v: committed a node drain of a node uncordoned before its runtime drained", c)
	}
	if _, handed := w.pod().Labels[lullv1.LabelDrained]; handed || len(w.deletes) != 0 {
		t.Errorf("pod handed off (labels %v) or deleted (%d): the node was uncordoned", w.pod().Labels, len(w.deletes))
	}
}

// Rule 9 on the hand-off: a committed replacement is held, the pod kept,
// while the catalog refuses the image its successor would run. The pod
// was committed and handed off (labelled lull.dev/drained) on a cordoned
// node; then the catalog narrows and no longer lists the StatefulSet's
// image. lull holds its own delete (ImageNotAllowed), but leaves the label
// on: the budget still does not cover the pod, so the node's drain
// evicts it at its next retry and the StatefulSet controller creates the
// successor from the refused template, the very replacement the hold
// exists to prevent. A held pod must be taken back under its budget.
func TestHeldHandedOffPodIsTakenBackUnderItsBudgetWhenTheCatalogNarrows(t *testing.T) {
	var id string
	w := newWorld(t, apiServerStatefulSets(nil), func(s *lullv1.Session, pod *corev1.Pod) {
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
	if w.pod().Labels[lullv1.LabelDrained] != id {
		t.Fatalf("pod labels %v; the scenario needs the pod handed off", w.pod().Labels)
	}
	createCatalog(t, w, "1")                                        // example.com/agent:2 no longer listed
	w.clock.SetTime(t0.Add(rollout.NodeDrainHandoff + time.Second)) // past the hand-off: lull's own delete is due, and held
	for range 2 {
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	c := meta.FindStatusCondition(w.session().Status.Conditions, lullv1.ConditionUpToDate)
	if c == nil || c.Reason != lullv1.ReasonImageNotAllowed {
		t.Fatalf("UpToDate %+v; the scenario needs the replacement held (ImageNotAllowed)", c)
	}
	if len(w.deletes) != 0 {
		t.Fatalf("deleted while held")
	}
	if _, handed := w.pod().Labels[lullv1.LabelDrained]; handed {
		t.Errorf("pod labels %v: held for the catalog, yet left to the node's drain to evict, and its successor created on the refused image", w.pod().Labels)
	}
}
