package rollout

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
)

// Node drains: a session pod whose node is being disrupted (kubectl drain,
// a managed node upgrade, an autoscaler's scale-down) is drained first
// (reason NodeDrain), then handed to the node's drain to evict. The
// PodDisruptionBudget lull keeps for the session (the session controller's)
// makes the Eviction API answer 429 for it until then; see
// docs/protocol.md, "Node drains".

// The taints of a node being drained that lull knows. kubectl cordon sets
// spec.unschedulable, which the node lifecycle controller mirrors as
// corev1.TaintNodeUnschedulable.
const (
	// TaintKarpenterDisrupted is Karpenter's taint on a node it is
	// consolidating, replacing for drift or expiring.
	TaintKarpenterDisrupted = "karpenter.sh/disrupted"
	// TaintClusterAutoscalerToBeDeleted is cluster-autoscaler's taint on a
	// node it is scaling down.
	TaintClusterAutoscalerToBeDeleted = "ToBeDeletedByClusterAutoscaler"
)

// NodeDrainHandoff is how long lull leaves a drained pod it handed to its
// node's drain (labelled lull.dev/drained, so its budget no longer covers
// it) before it deletes the pod itself: the node may have been cordoned by
// hand with no drain running. It is longer than kubectl drain's wait
// between two evictions of a pod the budget refused (EvictErrorRetryDelay,
// 5 s), so a drain that is running evicts the pod first, and waits for
// exactly that pod (its UID) to go.
const NodeDrainHandoff = 15 * time.Second

// NodeDisruption reports whether pod's node is being disrupted, and why
// ("node kwok-node-1 is cordoned"): the node is cordoned
// (spec.unschedulable) or carries one of the known taints of a drain
// (node.kubernetes.io/unschedulable, karpenter.sh/disrupted,
// ToBeDeletedByClusterAutoscaler), or the pod carries the DisruptionTarget
// condition (True). A nil node is one not known (not in the cache, or not
// yet scheduled): not disrupted, as far as lull can tell.
func NodeDisruption(node *corev1.Node, pod *corev1.Pod) (why string, ok bool) {
	if pod != nil {
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
				why := fmt.Sprintf("pod %s is marked %s", pod.Name, corev1.DisruptionTarget)
				if c.Reason != "" {
					why += " (" + c.Reason + ")"
				}
				return why, true
			}
		}
	}
	if node == nil {
		return "", false
	}
	if node.Spec.Unschedulable {
		return fmt.Sprintf("node %s is cordoned", node.Name), true
	}
	for _, t := range node.Spec.Taints {
		switch t.Key {
		case corev1.TaintNodeUnschedulable, TaintKarpenterDisrupted, TaintClusterAutoscalerToBeDeleted:
			return fmt.Sprintf("node %s has taint %s", node.Name, t.Key), true
		}
	}
	return "", false
}

// NodeDrainPolicyOf returns the node drain policy p with the defaults the
// API server gives an omitted field: strategy Drain, drainTimeout 10m,
// onDrainTimeout Replace, wave Node.
func NodeDrainPolicyOf(p lullv1.NodeDrainPolicy) lullv1.NodeDrainPolicy {
	if p.Strategy == "" {
		p.Strategy = lullv1.NodeDrainStrategyDrain
	}
	if p.DrainTimeout == nil {
		p.DrainTimeout = &metav1.Duration{Duration: lullv1.DefaultNodeDrainTimeout}
	}
	if p.OnDrainTimeout == "" {
		p.OnDrainTimeout = lullv1.DrainTimeoutReplace
	}
	if p.Wave == "" {
		p.Wave = lullv1.NodeDrainWaveNode
	}
	return p
}

// GuardsEvictions reports whether sessions under p have a budget lull
// keeps over their pod (strategy Drain).
func GuardsEvictions(p lullv1.NodeDrainPolicy) bool {
	return NodeDrainPolicyOf(p).Strategy == lullv1.NodeDrainStrategyDrain
}

// nodeDisrupted is NodeDisruption of o's pod under the template's policy:
// never under strategy Ignore.
func (o Observed) nodeDisrupted() (string, bool) {
	if !GuardsEvictions(o.NodeDrain) || o.Pod == nil {
		return "", false
	}
	return NodeDisruption(o.Node, o.Pod)
}

// decideNodeDrain returns the node drain step of a running session's pod,
// if it has one (Decide's rule 8a):
//
//   - its node disrupted and no request outstanding for the pod: a drain
//     request with reason NodeDrain, a fresh ID, the node named, deadline
//     now + drainTimeout; under wave Template only with a place in the
//     wave (WaitingForWave until then);
//   - a request of another reason outstanding for the pod (Update,
//     Lifetime, Idle, Manual): reused, not doubled, its ID and reason
//     kept; it is marked with the node and its deadline becomes the
//     earlier of its own and the node drain's, once;
//   - the runtime answered Drained: committed (status.replacement,
//     compare-and-swap), then handed to the node's drain (HandOff);
//   - the deadline passed: onDrainTimeout Replace commits and hands off
//     all the same (a Warning Event names the node); Wait keeps waiting,
//     saying the node's drain waits on the session;
//   - a claim pins the pod to its node (o.Pinned): no node drain at all
//     (nodeDrainPinned);
//   - the node no longer disrupted (uncordoned, taint gone, strategy now
//     Ignore): a NodeDrain request is withdrawn (the runtime reopens,
//     nothing deleted), a reused one goes on for its own reason.
//
// A committed replacement never comes here: finishCommitted goes first.
func decideNodeDrain(o Observed) (Action, bool) {
	s, pod := o.Session, o.Pod
	cur := s.Status.Drain
	if cur != nil && cur.PodUID != pod.UID {
		cur = nil
	}
	why, disrupted := o.nodeDisrupted()
	if !disrupted {
		if cur == nil || cur.Node == "" {
			return Action{}, false
		}
		if l, lost := o.nodeLost(); lost && l.Gone {
			return nodeDrainNodeGone(o, cur, l), true
		}
		return nodeDrainWithdrawn(o, cur), true
	}
	if o.Pinned != nil {
		return nodeDrainPinned(o, cur)
	}
	p := NodeDrainPolicyOf(o.NodeDrain)
	node := pod.Spec.NodeName
	deadline := metav1.NewTime(deadlineAfter(o.Now, p.DrainTimeout.Duration))
	if cur == nil {
		if p.Wave == lullv1.NodeDrainWaveTemplate && !o.Admitted {
			return Action{Kind: Wait, Reason: lullv1.ReasonWaitingForWave,
				Message: fmt.Sprintf("%s; pod %s waits for a place in the template's rollout wave before it drains (nodeDrainPolicy.wave Template)", why, pod.Name)}, true
		}
		r := newRequest(s.Status, pod.UID, lullv1.DrainReasonNodeDrain, o.Now)
		r.Node, r.Deadline = node, &deadline
		return Action{Kind: RequestDrain, Reason: lullv1.ReasonNodeDrain, Drain: r, RequeueAfter: deadline.Sub(o.Now) + time.Second/10,
			Message: fmt.Sprintf("%s; asked the runtime of pod %s to drain before it moves to another node (request %s, deadline %s)",
				why, pod.Name, r.RequestID, deadline.UTC().Format(time.RFC3339))}, true
	}
	if cur.Node != node || cur.Deadline == nil {
		// An outstanding request of another reason is reused: the runtime
		// is already draining, and a second request would only restart
		// it. The node drain's deadline bounds it too, told to the
		// runtime on the same request ID. A request that names the node
		// but lost its deadline (another writer of the status) gets it
		// back.
		cur = cur.DeepCopy()
		cur.Node = node
		if cur.Deadline == nil || deadline.Before(cur.Deadline) {
			cur.Deadline = &deadline
		}
	}
	switch {
	case drain.Answers(cur, s.Status.Runtime, pod.UID):
		a := commitDrained(o, fmt.Sprintf("%s; runtime of pod %s reported Drained for request %s; replacing the pod on another node", why, pod.Name, cur.RequestID))
		a.Drain = cur
		return a, true
	case cur.Deadline != nil && !o.Now.Before(cur.Deadline.Time):
		return nodeDrainDeadlinePassed(o, cur, p, why), true
	}
	return Action{Kind: Wait, Reason: lullv1.ReasonNodeDrain, Drain: cur, RequeueAfter: cur.Deadline.Sub(o.Now) + time.Second/10,
		Message: fmt.Sprintf("%s; waiting for the runtime of pod %s to drain before it moves to another node (request %s, deadline %s)",
			why, pod.Name, cur.RequestID, cur.Deadline.UTC().Format(time.RFC3339))}, true
}

// nodeDrainDeadlinePassed is the step of a node drain whose deadline has
// passed unanswered: onDrainTimeout Replace commits the pod's replacement
// (handed to the node's drain after, as a drained one is); Wait keeps
// waiting, and says the node's drain waits on this session. The message
// of the wait does not change from one reconcile to the next (no turn
// count): its first write is the Warning Event.
func nodeDrainDeadlinePassed(o Observed, cur *lullv1.DrainRequest, p lullv1.NodeDrainPolicy, why string) Action {
	pod, node := o.Pod, o.Pod.Spec.NodeName
	if p.OnDrainTimeout == lullv1.DrainTimeoutReplace {
		turns := "its runtime's turns"
		if r := o.Session.Status.Runtime; r != nil && r.PodUID == pod.UID {
			turns = fmt.Sprintf("%d active turn(s)", r.ActiveTurns)
		}
		a := commitCutShort(o, lullv1.ReplacementDrainDeadlineExceeded,
			fmt.Sprintf("%s; node drain %s passed its deadline %s undrained: replacing pod %s of node %s on another node with %s (nodeDrainPolicy.onDrainTimeout Replace)",
				why, cur.RequestID, cur.Deadline.UTC().Format(time.RFC3339), pod.Name, node, turns))
		a.Drain = cur
		return a
	}
	return Action{Kind: Wait, Reason: lullv1.ReasonNodeDrain, Drain: cur,
		Message: fmt.Sprintf("%s; node drain %s passed its deadline %s and the runtime of pod %s has not drained: the drain of node %s waits on this session (nodeDrainPolicy.onDrainTimeout Wait)",
			why, cur.RequestID, cur.Deadline.UTC().Format(time.RFC3339), pod.Name, node)}
}

// nodeDrainPinned is the step of a pod on a disrupted node that one of
// its claims holds there (o.Pinned): draining it would only replace it
// with a pod that can never start, so no NodeDrain request is sent, and
// the budget keeps refusing the node's evictions: the running turn stays
// protected. No deadline runs, so drainTimeout and onDrainTimeout never
// delete the pod for the node drain alone: the node's drain waits and the
// PinnedToNode condition says why; the operator decides (a schedulable
// node for the volume, a suspension, an uncordon). A NodeDrain request
// sent before the pin was seen is withdrawn (the runtime reopens); a
// reused request loses the node's mark and goes on for its own reason; no
// request at all leaves the rest of the rules (an update drain, the
// lifecycle) as they are.
func nodeDrainPinned(o Observed, cur *lullv1.DrainRequest) (Action, bool) {
	if cur == nil || cur.Node == "" {
		return Action{}, false
	}
	msg := fmt.Sprintf("%s; withdrew node drain %s of pod %s", o.Pinned, cur.RequestID, o.Pod.Name)
	if cur.Reason == lullv1.DrainReasonNodeDrain {
		return Action{Kind: Wait, Reason: lullv1.ReasonNodeDrain, Message: msg}, true
	}
	d := cur.DeepCopy()
	d.Node = ""
	return Action{Kind: Wait, Reason: lullv1.ReasonNodeDrain, Drain: d,
		Message: fmt.Sprintf("%s; drain request %s of pod %s goes on for its own reason (%s)", o.Pinned, cur.RequestID, o.Pod.Name, cur.Reason)}, true
}

// nodeDrainWithdrawn is the step of a session whose pod's node is no
// longer disrupted while a request marked with it is outstanding and not
// committed: a NodeDrain request is withdrawn (the runtime reopens,
// nothing is deleted); a reused request of another reason loses the mark
// and goes on for its own reason (its deadline, told to the runtime, is
// kept).
func nodeDrainWithdrawn(o Observed, cur *lullv1.DrainRequest) Action {
	a := Action{Kind: Wait, Reason: lullv1.ReasonNodeDrain}
	if cur.Reason == lullv1.DrainReasonNodeDrain {
		a.Message = fmt.Sprintf("node %s is no longer being drained; withdrew node drain %s of pod %s: its runtime reopens and the session keeps running",
			cur.Node, cur.RequestID, o.Pod.Name)
		return a
	}
	a.Drain = cur.DeepCopy()
	a.Drain.Node = ""
	a.Message = fmt.Sprintf("node %s is no longer being drained; drain request %s of pod %s goes on for its own reason (%s)",
		cur.Node, cur.RequestID, o.Pod.Name, cur.Reason)
	return a
}

// nodeDrainNodeGone is the step of a session whose pod's node was deleted
// while a request marked with it is outstanding: the node is not "no
// longer being drained", it is gone, and the request is kept as it is
// (nothing to withdraw: the runtime cannot answer, nor reopen). lull
// deletes nothing: the pod garbage collector removes a pod bound to a
// node that no longer exists, and the StatefulSet then creates its
// successor on another node; the pod's deletion reconciles the session.
func nodeDrainNodeGone(o Observed, cur *lullv1.DrainRequest, l NodeLoss) Action {
	return Action{Kind: Wait, Reason: lullv1.ReasonNodeDrain, Drain: cur,
		Message: fmt.Sprintf("node %s is deleted under node drain %s of pod %s: its runtime cannot answer; "+
			"lull deletes nothing, the pod garbage collector removes the pod and the StatefulSet creates it on another node (docs/operations.md#a-node-lost)",
			l.Node, cur.RequestID, o.Pod.Name)}
}

// NodeDrainWithdrawn reports whether a is the withdrawal of a node drain
// (or of the node's mark on a reused request) from the session observed
// in o: a Normal Event says so.
func NodeDrainWithdrawn(o Observed, a Action) bool {
	d := o.Session.Status.Drain
	return a.Kind == Wait && a.Reason == lullv1.ReasonNodeDrain && d != nil && d.Node != "" && (a.Drain == nil || a.Drain.Node == "")
}

// nodeDrainOverdue reports whether a is a node drain waiting past its
// deadline (onDrainTimeout Wait).
func nodeDrainOverdue(o Observed, a Action) bool {
	return a.Kind == Wait && a.Reason == lullv1.ReasonNodeDrain && a.Replacement == nil && a.Drain != nil && a.Drain.Node != "" &&
		a.Drain.Deadline != nil && !o.Now.Before(a.Drain.Deadline.Time)
}

// handOff returns the step that finishes a committed replacement of a pod
// whose node is being disrupted (why): instead of deleting it, lull
// labels it lull.dev/drained (HandOff), so its budget no longer covers it
// and the node's drain evicts exactly this pod. kubectl drain re-reads a
// pod the budget refused by name and evicts whatever pod has that name:
// had lull deleted the pod, the StatefulSet's successor of that name on
// another node would take its retries (refused forever, the node's drain
// never completing). A pod nobody has evicted NodeDrainHandoff after its
// label landed is deleted by lull (a node cordoned by hand, no drain
// running).
func handOff(o Observed, c *lullv1.Replacement, why string) Action {
	s, pod := o.Session, o.Pod
	node := pod.Spec.NodeName
	if _, labelled := pod.Labels[lullv1.LabelDrained]; !labelled {
		return Action{Kind: HandOff, Reason: string(c.Reason), PodUID: pod.UID, Drain: s.Status.Drain, Replacement: c, RequeueAfter: NodeDrainHandoff + time.Second/10,
			Message: fmt.Sprintf("%s; handing pod %s (%s) to the drain of node %s: labelled %s, so lull's budget no longer covers it; lull deletes it itself if nobody evicts it within %s",
				why, pod.Name, c.Reason, node, lullv1.LabelDrained, NodeDrainHandoff)}
	}
	at, err := time.Parse(time.RFC3339, pod.Annotations[lullv1.AnnotationDrainedAt])
	if err == nil && o.Now.Before(at.Add(NodeDrainHandoff)) {
		return Action{Kind: Wait, Reason: string(c.Reason), Drain: s.Status.Drain, Replacement: c, RequeueAfter: at.Add(NodeDrainHandoff).Sub(o.Now) + time.Second/10,
			Message: fmt.Sprintf("pod %s (%s) was handed to the drain of node %s at %s; lull deletes it itself at %s if nobody evicts it",
				pod.Name, c.Reason, node, at.UTC().Format(time.RFC3339), at.Add(NodeDrainHandoff).UTC().Format(time.RFC3339))}
	}
	return Action{Kind: DeletePod, Reason: string(c.Reason), PodUID: pod.UID, Drain: s.Status.Drain, Replacement: c,
		Message: fmt.Sprintf("nobody evicted pod %s of node %s within %s of its hand-off; deleting it (%s)", pod.Name, node, NodeDrainHandoff, c.Reason)}
}

// HandOffLabel is the value of lull.dev/drained lull sets on a pod it
// hands off for replacement c: the drain request it was committed for, or
// the commitment's reason when it ended none.
func HandOffLabel(c *lullv1.Replacement) string {
	if c.RequestID != "" {
		return c.RequestID
	}
	return strings.ToLower(string(c.Reason))
}

// HandedOff reports whether pod carries lull.dev/drained: the Eviction
// API finds no budget of lull's over it.
func HandedOff(pod *corev1.Pod) bool {
	if pod == nil {
		return false
	}
	_, ok := pod.Labels[lullv1.LabelDrained]
	return ok
}

// TakesBackHandOff reports whether o's pod carries lull.dev/drained
// while it must be under its budget, so the label must go: no
// replacement of it is committed (another writer labelled a live pod, or
// the commitment is gone), or the catalog refuses the image its
// successor would run (rule 9: the replacement is held, and an evictor
// must not finish it).
func TakesBackHandOff(o Observed) bool {
	if !HandedOff(o.Pod) {
		return false
	}
	c := o.Session.Status.Replacement
	return c == nil || c.PodUID != o.Pod.UID || o.ImageRefused != ""
}

// NodeDrainStep reports whether a rests on o's pod's node being
// disrupted: a node drain's commitment, or the hand-off of a committed
// pod to the node's drain. Such a step is confirmed on the Node as the API
// server holds it (the cache may not show an uncordon yet).
func NodeDrainStep(a Action) bool {
	return a.HandOff || a.Kind == HandOff || (a.Kind == Commit && a.Drain != nil && a.Drain.Node != "")
}
