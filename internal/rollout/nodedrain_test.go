package rollout

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
)

const nodeName = "kwok-node-1"

// onNode is a fixture whose current pod runs on node kwok-node-1, which
// is cordoned, under the default node drain policy; its runtime serves
// one turn.
func onNode() *fixture {
	f := newFixture()
	f.o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = newRev
	f.o.Pod.Spec.NodeName = nodeName
	f.o.Node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}, Spec: corev1.NodeSpec{Unschedulable: true}}
	f.o.Session.Status.Runtime = report(podUID, "", lullv1.RuntimeServing, 1)
	f.o.ReportWrittenAt = now.Add(-time.Second)
	f.o.Admitted = false // a node drain under wave Node needs no place
	return f
}

// nodeDrain is the NodeDrain request of the pod issued with sequence seq
// at at, deadline the default 10m after.
func nodeDrain(seq int64, at time.Time) *lullv1.DrainRequest {
	d := metav1.NewTime(at.Add(lullv1.DefaultNodeDrainTimeout))
	return &lullv1.DrainRequest{RequestID: drain.RequestID(podUID, lullv1.DrainReasonNodeDrain, seq), PodUID: podUID, Reason: lullv1.DrainReasonNodeDrain,
		Sequence: seq, RequestedAt: metav1.NewTime(at), Deadline: &d, Node: nodeName}
}

func TestNodeDisruptionNamesWhy(t *testing.T) {
	node := func(edit func(n *corev1.Node)) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
		edit(n)
		return n
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "s-0"}}
	target := pod.DeepCopy()
	target.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI"}}
	for _, c := range []struct {
		name string
		node *corev1.Node
		pod  *corev1.Pod
		why  string
	}{
		{"cordoned", node(func(n *corev1.Node) { n.Spec.Unschedulable = true }), pod, "node n1 is cordoned"},
		{"unschedulable taint", node(func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}}
		}), pod, "node n1 has taint node.kubernetes.io/unschedulable"},
		{"karpenter", node(func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "example.com/other"}, {Key: TaintKarpenterDisrupted, Effect: corev1.TaintEffectNoSchedule}}
		}), pod, "node n1 has taint karpenter.sh/disrupted"},
		{"cluster-autoscaler", node(func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: TaintClusterAutoscalerToBeDeleted, Effect: corev1.TaintEffectNoSchedule}}
		}), pod, "node n1 has taint ToBeDeletedByClusterAutoscaler"},
		{"DisruptionTarget", node(func(*corev1.Node) {}), target, "pod s-0 is marked DisruptionTarget (EvictionByEvictionAPI)"},
		{"DisruptionTarget, node unknown", nil, target, "pod s-0 is marked DisruptionTarget (EvictionByEvictionAPI)"},
		{"schedulable", node(func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{{Key: "example.com/other"}} }), pod, ""},
		{"node unknown", nil, pod, ""},
	} {
		why, ok := NodeDisruption(c.node, c.pod)
		if ok != (c.why != "") || why != c.why {
			t.Errorf("%s: NodeDisruption = %q, %t; want %q", c.name, why, ok, c.why)
		}
	}
}

func TestCordonedNodeDrainsItsSessionWithAFreshRequestNamingTheNode(t *testing.T) {
	f := onNode()
	f.o.Session.Status.DrainSequence = 4
	a := decide(f.o)
	if a.Kind != RequestDrain || a.Reason != lullv1.ReasonNodeDrain || a.Drain == nil {
		t.Fatalf("node cordoned: %s/%s; want a NodeDrain request", a.Kind, a.Reason)
	}
	d := a.Drain
	if d.Reason != lullv1.DrainReasonNodeDrain || d.Node != nodeName || d.Sequence != 5 || d.RequestID != drain.RequestID(podUID, lullv1.DrainReasonNodeDrain, 5) {
		t.Fatalf("request %+v; want reason NodeDrain, node %s, the next sequence and its fresh ID", d, nodeName)
	}
	if d.Deadline == nil || !d.Deadline.Time.Equal(now.Add(10*time.Minute)) {
		t.Fatalf("deadline %v; want now + the default drainTimeout 10m", d.Deadline)
	}
	if !strings.Contains(a.Message, "node kwok-node-1 is cordoned") {
		t.Errorf("message %q does not say why", a.Message)
	}
	st := nextStatus(f.o, a)
	if !conditionIs(st, lullv1.ConditionUpToDate, metav1.ConditionTrue, lullv1.ReasonUpToDate) {
		t.Errorf("a current pod drained for its node is still up to date: %+v", st.Conditions)
	}
	if c := findCondition(st.Conditions, lullv1.ConditionDraining); c == nil || c.Reason != string(lullv1.DrainReasonNodeDrain) || !strings.Contains(c.Message, nodeName) {
		t.Errorf("Draining condition %+v; want reason NodeDrain naming the node", c)
	}
	if st.Phase != lullv1.SessionDraining || st.Drain.Node != nodeName {
		t.Errorf("phase %s drain %+v; want Draining with the node named", st.Phase, st.Drain)
	}
}

func TestNodeDrainWaitsThenCommitsOnDrainedAndHandsOff(t *testing.T) {
	f := onNode()
	req := nodeDrain(1, now.Add(-time.Minute))
	outstanding(&f.o, req)
	if a := decide(f.o); a.Kind != Wait || a.Reason != lullv1.ReasonNodeDrain || a.Drain == nil || a.Drain.RequestID != req.RequestID {
		t.Fatalf("node drain outstanding, a turn in flight: %s/%s %+v; want Wait keeping the request", a.Kind, a.Reason, a.Drain)
	}
	f.o.Session.Status.Runtime = report(podUID, req.RequestID, lullv1.RuntimeDrained, 0)
	a := decide(f.o)
	if a.Kind != Commit || a.Replacement == nil || a.Replacement.Reason != lullv1.ReplacementDrained || a.Replacement.RequestID != req.RequestID || !a.HandOff {
		t.Fatalf("runtime Drained: %s/%s %+v handOff %t; want a Drained Commit handed off", a.Kind, a.Reason, a.Replacement, a.HandOff)
	}
	// Committed: the pod is labelled for the node's drain, not deleted.
	f.o.Session.Status.Replacement = a.Replacement
	a = decide(f.o)
	if a.Kind != HandOff || a.PodUID != podUID || a.Replacement == nil {
		t.Fatalf("committed on a cordoned node: %s/%s; want HandOff", a.Kind, a.Reason)
	}
	if got := HandOffLabel(a.Replacement); got != req.RequestID {
		t.Errorf("label value %q; want the request ID %q", got, req.RequestID)
	}
	// Labelled: lull waits NodeDrainHandoff for the node's drain to evict it.
	f.o.Pod.Labels[lullv1.LabelDrained] = req.RequestID
	f.o.Pod.Annotations = map[string]string{lullv1.AnnotationDrainedAt: now.Add(-5 * time.Second).Format(time.RFC3339)}
	a = decide(f.o)
	if a.Kind != Wait || a.RequeueAfter < 9*time.Second || a.RequeueAfter > 11*time.Second || a.Replacement == nil {
		t.Fatalf("handed off 5s ago: %s/%s after %s; want Wait for the rest of the %s", a.Kind, a.Reason, a.RequeueAfter, NodeDrainHandoff)
	}
	// Nobody evicted it: lull deletes it.
	f.o.Now = now.Add(11 * time.Second)
	if a := decide(f.o); a.Kind != DeletePod || a.PodUID != podUID {
		t.Fatalf("handed off %s ago and not evicted: %s/%s; want DeletePod", NodeDrainHandoff+time.Second, a.Kind, a.Reason)
	}
}

func TestNodeDrainReusesTheOutstandingRequest(t *testing.T) {
	for name, req := range map[string]*lullv1.DrainRequest{
		"update":   requested(podUID, newRev, 3, now.Add(-time.Minute)),
		"lifetime": {RequestID: drain.RequestID(podUID, lullv1.DrainReasonLifetime, 3), PodUID: podUID, Reason: lullv1.DrainReasonLifetime, Sequence: 3, RequestedAt: metav1.NewTime(now.Add(-time.Minute))},
		"idle":     idleRequest(podUID, 3),
		"manual":   manual(podUID, 3, now.Add(-time.Minute)),
	} {
		f := onNode()
		if name == "update" {
			f.o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = oldRev
			f.o.Admitted = true
		}
		outstanding(&f.o, req)
		a := decide(f.o)
		if a.Drain == nil || a.Drain.RequestID != req.RequestID || a.Drain.Reason != req.Reason || a.Drain.Sequence != req.Sequence {
			t.Errorf("%s request outstanding on a cordoned node: %s/%s %+v; want the same request reused", name, a.Kind, a.Reason, a.Drain)
			continue
		}
		if a.Kind == RequestDrain {
			t.Errorf("%s: a second request was issued", name)
		}
		if a.Drain.Node != nodeName || a.Drain.Deadline == nil || !a.Drain.Deadline.Time.Equal(now.Add(10*time.Minute)) {
			t.Errorf("%s: reused request %+v; want the node named and the node drain's deadline", name, a.Drain)
		}
	}
}

func TestReusedRequestKeepsAnEarlierDeadline(t *testing.T) {
	f := onNode()
	f.o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = oldRev
	early := now.Add(2 * time.Minute)
	outstanding(&f.o, withDeadline(requested(podUID, newRev, 1, now.Add(-time.Minute)), early))
	a := decide(f.o)
	if a.Drain == nil || a.Drain.Deadline == nil || !a.Drain.Deadline.Time.Equal(early) {
		t.Fatalf("update deadline %s, node drain's later: %+v; want the earlier of the two", early, a.Drain)
	}
	// At the earlier deadline the node drain's onDrainTimeout decides.
	f.o.Session.Status.Drain = a.Drain
	f.o.Now = early
	if a := decide(f.o); a.Kind != Commit || a.Replacement.Reason != lullv1.ReplacementDrainDeadlineExceeded || !a.HandOff {
		t.Fatalf("past the earlier deadline: %s/%s; want the DrainDeadlineExceeded Commit, handed off", a.Kind, a.Reason)
	}
}

func TestUncordonBeforeDrainedWithdrawsTheNodeDrain(t *testing.T) {
	f := onNode()
	req := nodeDrain(1, now.Add(-time.Minute))
	outstanding(&f.o, req)
	f.o.Session.Status.Runtime = report(podUID, req.RequestID, lullv1.RuntimeDraining, 1)
	f.o.Node.Spec.Unschedulable = false
	a := decide(f.o)
	if a.Kind != Wait || a.Drain != nil || a.Replacement != nil || a.Reason != lullv1.ReasonNodeDrain {
		t.Fatalf("node uncordoned: %s/%s drain %+v; want the request withdrawn, nothing committed", a.Kind, a.Reason, a.Drain)
	}
	if !NodeDrainWithdrawn(f.o, a) {
		t.Error("the withdrawal is not reported as one (no Event)")
	}
	if ev := Events(f.o, nextStatus(f.o, a), a); len(ev) != 1 || ev[0].Reason != lullv1.ReasonNodeDrain || ev[0].Type != corev1.EventTypeNormal {
		t.Errorf("events %+v; want one Normal NodeDrain", ev)
	}
	st := nextStatus(f.o, a)
	if st.Drain != nil || st.Phase != lullv1.SessionRunning {
		t.Errorf("status drain %+v phase %s; want no request, Running", st.Drain, st.Phase)
	}
}

func TestUncordonLeavesAReusedRequestToItsOwnReason(t *testing.T) {
	f := onNode()
	f.o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = oldRev
	req := withDeadline(requested(podUID, newRev, 1, now.Add(-time.Minute)), now.Add(5*time.Minute))
	req.Node = nodeName
	outstanding(&f.o, req)
	f.o.Node.Spec.Unschedulable = false
	a := decide(f.o)
	if a.Drain == nil || a.Drain.RequestID != req.RequestID || a.Drain.Node != "" {
		t.Fatalf("uncordoned under a reused update drain: %s/%s %+v; want the request kept without the node", a.Kind, a.Reason, a.Drain)
	}
	f.o.Session.Status.Drain = a.Drain
	if a := decide(f.o); a.Kind != Wait || a.Reason != lullv1.ReasonDraining || a.Drain.RequestID != req.RequestID {
		t.Fatalf("then: %s/%s; want the update drain going on", a.Kind, a.Reason)
	}
}

func TestNodeDrainDeadlineReplaceCommitsWithAWarning(t *testing.T) {
	f := onNode()
	req := nodeDrain(1, now.Add(-10*time.Minute))
	outstanding(&f.o, req)
	a := decide(f.o)
	if a.Kind != Commit || a.Replacement == nil || a.Replacement.Reason != lullv1.ReplacementDrainDeadlineExceeded || a.Replacement.RequestID != req.RequestID || !a.HandOff {
		t.Fatalf("deadline reached, onDrainTimeout Replace (default): %s/%s %+v; want DrainDeadlineExceeded committed", a.Kind, a.Reason, a.Replacement)
	}
	if !strings.Contains(a.Message, nodeName) {
		t.Errorf("message %q does not name the node", a.Message)
	}
	f.o.Session.Status.Replacement = a.Replacement
	h := decide(f.o)
	e, ok := StepEvent(f.o, h)
	if h.Kind != HandOff || !ok || e.Type != corev1.EventTypeWarning || e.Reason != lullv1.ReasonDrainDeadlineExceeded || !strings.Contains(e.Note, nodeName) {
		t.Fatalf("hand-off %s event %+v; want a Warning DrainDeadlineExceeded naming the node", h.Kind, e)
	}
}

func TestNodeDrainDeadlineWaitSaysTheNodeWaits(t *testing.T) {
	f := onNode()
	f.o.NodeDrain.OnDrainTimeout = lullv1.DrainTimeoutWait
	req := nodeDrain(1, now.Add(-11*time.Minute))
	outstanding(&f.o, req)
	a := decide(f.o)
	if a.Kind != Wait || a.Replacement != nil || a.Drain == nil || !strings.Contains(a.Message, "the drain of node kwok-node-1 waits on this session") {
		t.Fatalf("past the deadline under Wait: %s/%s %q; want Wait saying the node's drain waits", a.Kind, a.Reason, a.Message)
	}
	st := nextStatus(f.o, a)
	ev := Events(f.o, st, a)
	if len(ev) != 1 || ev[0].Type != corev1.EventTypeWarning || ev[0].Reason != lullv1.ReasonNodeDrain {
		t.Fatalf("events %+v; want one Warning NodeDrain", ev)
	}
	// Written: no second Warning.
	f.o.Session.Status = st
	if ev := Events(f.o, nextStatus(f.o, decide(f.o)), decide(f.o)); len(ev) != 0 {
		t.Errorf("events once written %+v; want none", ev)
	}
}

func TestNodeDrainUnderWaveTemplateWaitsForAPlace(t *testing.T) {
	f := onNode()
	f.o.NodeDrain.Wave = lullv1.NodeDrainWaveTemplate
	a := decide(f.o)
	if a.Kind != Wait || a.Reason != lullv1.ReasonWaitingForWave || a.Drain != nil {
		t.Fatalf("wave Template without a place: %s/%s; want WaitingForWave", a.Kind, a.Reason)
	}
	f.o.Admitted = true
	if a := decide(f.o); a.Kind != RequestDrain || a.Drain.Reason != lullv1.DrainReasonNodeDrain {
		t.Fatalf("wave Template with a place: %s/%s; want the NodeDrain request", a.Kind, a.Reason)
	}
	// The request holds its place while outstanding.
	f.o.Session.Name = "s"
	outstanding(&f.o, nodeDrain(1, now))
	if !Admitted([]lullv1.WaveEntry{{Session: "s", Sequence: 1}}, f.o.Session) {
		t.Error("an outstanding NodeDrain request does not hold its place")
	}
}

func TestNodeDrainUnderWaveNodeTakesNoPlace(t *testing.T) {
	f := onNode()
	f.o.Admitted = false
	if a := decide(f.o); a.Kind != RequestDrain {
		t.Fatalf("wave Node (default) without a place: %s/%s; want the request at once", a.Kind, a.Reason)
	}
}

func TestIgnoreStrategyLeavesNodeDrainsToKubernetes(t *testing.T) {
	f := onNode()
	f.o.NodeDrain.Strategy = lullv1.NodeDrainStrategyIgnore
	if a := decide(f.o); a.Kind != Wait || a.Reason != lullv1.ReasonUpToDate || a.Drain != nil {
		t.Fatalf("Ignore on a cordoned node: %s/%s; want nothing", a.Kind, a.Reason)
	}
	// A node drain outstanding from before the change is withdrawn.
	outstanding(&f.o, nodeDrain(1, now))
	if a := decide(f.o); a.Drain != nil {
		t.Fatalf("Ignore with a node drain outstanding: %s/%s %+v; want it withdrawn", a.Kind, a.Reason, a.Drain)
	}
	// A committed pod is deleted, not handed off.
	f.o.Session.Status.Drain = nil
	f.o.Session.Status.Replacement = committed(podUID, lullv1.ReplacementDrained, "")
	if a := decide(f.o); a.Kind != DeletePod {
		t.Fatalf("Ignore, committed: %s; want DeletePod", a.Kind)
	}
}

func TestDisruptionTargetDrainsTheSession(t *testing.T) {
	f := onNode()
	f.o.Node = nil
	f.o.Pod.Status.Conditions = append(f.o.Pod.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "PreemptionByScheduler"})
	a := decide(f.o)
	if a.Kind != RequestDrain || a.Drain.Reason != lullv1.DrainReasonNodeDrain || a.Drain.Node != nodeName {
		t.Fatalf("pod marked DisruptionTarget: %s/%s %+v; want a NodeDrain request naming its node", a.Kind, a.Reason, a.Drain)
	}
}

func TestUnknownNodeIsNotDisrupted(t *testing.T) {
	f := onNode()
	f.o.Node = nil
	if a := decide(f.o); a.Kind != Wait || a.Reason != lullv1.ReasonUpToDate {
		t.Fatalf("node not known: %s/%s; want nothing of a node drain", a.Kind, a.Reason)
	}
}

func TestUpdateDrainOffADisruptedNodeIsDeletedAtOnce(t *testing.T) {
	f := newFixture()
	f.o.Pod.Spec.NodeName = nodeName
	f.o.Node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}
	req := requested(podUID, newRev, 1, now.Add(-time.Minute))
	outstanding(&f.o, req)
	f.o.Session.Status.Runtime = report(podUID, req.RequestID, lullv1.RuntimeDrained, 0)
	a := decide(f.o)
	if a.Kind != Commit || a.HandOff {
		t.Fatalf("update drained on a schedulable node: %s handOff %t; want a Commit deleted at once", a.Kind, a.HandOff)
	}
	f.o.Session.Status.Replacement = a.Replacement
	if a := decide(f.o); a.Kind != DeletePod {
		t.Fatalf("committed on a schedulable node: %s; want DeletePod", a.Kind)
	}
}

func TestSuspendedSessionOnADisruptedNodeIsScaledAwayNotHandedOff(t *testing.T) {
	f := onNode()
	f.o.Session.Spec.Suspend = true
	req := manual(podUID, 1, now.Add(-time.Minute))
	outstanding(&f.o, req)
	f.o.Session.Status.Runtime = report(podUID, req.RequestID, lullv1.RuntimeDrained, 0)
	if a := decide(f.o); a.Kind != Commit || a.HandOff {
		t.Fatalf("suspension drained on a cordoned node: %s handOff %t; want a Commit scaled away", a.Kind, a.HandOff)
	}
}

func conditionIs(st lullv1.SessionStatus, typ string, status metav1.ConditionStatus, reason string) bool {
	c := findCondition(st.Conditions, typ)
	return c != nil && c.Status == status && c.Reason == reason
}

func TestAnotherBudgetOverTheSessionPodIsNamedInACondition(t *testing.T) {
	f := onNode()
	f.o.Node.Spec.Unschedulable = false
	f.o.OverlappingBudgets = []string{"team-pdb"}
	a := decide(f.o)
	st := nextStatus(f.o, a)
	c := findCondition(st.Conditions, lullv1.ConditionBudgetsOverlap)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != lullv1.ReasonOverlappingBudgets ||
		!strings.Contains(c.Message, "team-pdb") || !strings.Contains(c.Message, "PodDisruptionBudget s (lull's)") {
		t.Fatalf("condition %+v; want BudgetsOverlap naming both budgets", c)
	}
	ev := Events(f.o, st, a)
	if len(ev) != 1 || ev[0].Type != corev1.EventTypeWarning || ev[0].Reason != lullv1.ReasonOverlappingBudgets {
		t.Fatalf("events %+v; want one Warning OverlappingBudgets", ev)
	}
	// Written: no second Warning; gone once no other budget selects it.
	f.o.Session.Status = st
	if ev := Events(f.o, nextStatus(f.o, a), a); len(ev) != 0 {
		t.Errorf("events once written %+v; want none", ev)
	}
	f.o.OverlappingBudgets = nil
	if c := findCondition(nextStatus(f.o, decide(f.o)).Conditions, lullv1.ConditionBudgetsOverlap); c != nil {
		t.Errorf("condition %+v with no other budget; want it removed", c)
	}
}

var pinnedFixture = &Pin{Claim: "workspace-s", Volume: "pv-local-1", Node: nodeName}

func TestPinnedSessionIsNotDrainedForItsNodeAndSaysWhy(t *testing.T) {
	f := onNode()
	f.o.Pinned = pinnedFixture
	a := decide(f.o)
	if a.Kind != Wait || a.Drain != nil || a.Replacement != nil || a.RequeueAfter != PinnedRecheck {
		t.Fatalf("pinned on a cordoned node: %s/%s drain %+v requeue %s; want no drain request, nothing committed, a recheck and no deadline", a.Kind, a.Reason, a.Drain, a.RequeueAfter)
	}
	st := nextStatus(f.o, a)
	c := findCondition(st.Conditions, lullv1.ConditionPinnedToNode)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != lullv1.ReasonVolumeNodeAffinity {
		t.Fatalf("condition %+v; want PinnedToNode True VolumeNodeAffinity", c)
	}
	for _, w := range []string{"workspace-s", "pv-local-1", nodeName} {
		if !strings.Contains(c.Message, w) {
			t.Errorf("condition message %q does not name %s", c.Message, w)
		}
	}
	if st.Drain != nil || st.Phase != lullv1.SessionRunning {
		t.Errorf("status drain %+v phase %s; want no request, Running", st.Drain, st.Phase)
	}
	ev := Events(f.o, st, a)
	if len(ev) != 1 || ev[0].Type != corev1.EventTypeWarning || ev[0].Reason != lullv1.ReasonVolumeNodeAffinity {
		t.Fatalf("events %+v; want one Warning VolumeNodeAffinity", ev)
	}
	f.o.Session.Status = st
	if ev := Events(f.o, nextStatus(f.o, a), a); len(ev) != 0 {
		t.Errorf("events once written %+v; want none", ev)
	}
	// Long past any drainTimeout: still nothing deleted for the node.
	f.o.Now = now.Add(time.Hour)
	if a := decide(f.o); a.Kind != Wait || a.Drain != nil || a.Replacement != nil {
		t.Fatalf("an hour on: %s/%s; want still nothing", a.Kind, a.Reason)
	}
	// Uncordoned: the condition goes.
	f.o.Node.Spec.Unschedulable = false
	if c := findCondition(nextStatus(f.o, decide(f.o)).Conditions, lullv1.ConditionPinnedToNode); c != nil {
		t.Errorf("condition %+v on an uncordoned node; want it removed", c)
	}
}

func TestPinSeenAfterTheNodeDrainWasRequestedWithdrawsIt(t *testing.T) {
	f := onNode()
	outstanding(&f.o, nodeDrain(1, now.Add(-time.Minute)))
	f.o.Pinned = pinnedFixture
	a := decide(f.o)
	if a.Kind != Wait || a.Drain != nil || a.Replacement != nil {
		t.Fatalf("pinned with a node drain outstanding: %s/%s %+v; want it withdrawn", a.Kind, a.Reason, a.Drain)
	}
	if !strings.Contains(a.Message, "pv-local-1") {
		t.Errorf("message %q does not say the volume holds the pod", a.Message)
	}
}

func TestPinnedStalePodKeepsItsUpdateDrain(t *testing.T) {
	f := onNode()
	f.o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = oldRev
	f.o.Admitted = true
	f.o.Pinned = pinnedFixture
	a := decide(f.o)
	if a.Kind != RequestDrain || a.Drain == nil || a.Drain.Reason != lullv1.DrainReasonUpdate || a.Drain.Node != "" {
		t.Fatalf("pinned stale pod: %s/%s %+v; want the update drain, unmarked by the node", a.Kind, a.Reason, a.Drain)
	}
}

func TestPinUnderIgnoreChangesNothing(t *testing.T) {
	f := onNode()
	f.o.NodeDrain.Strategy = lullv1.NodeDrainStrategyIgnore
	f.o.Pinned = pinnedFixture
	a := decide(f.o)
	if c := findCondition(nextStatus(f.o, a).Conditions, lullv1.ConditionPinnedToNode); c != nil || a.Reason != lullv1.ReasonUpToDate {
		t.Fatalf("Ignore: %s/%s condition %+v; want nothing", a.Kind, a.Reason, c)
	}
}
