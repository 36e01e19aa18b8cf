package rollout

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Involuntary node loss: the node a session pod is bound to is NotReady
// (its kubelet stopped answering: a crashed machine, a partition, a spot
// reclaim) or deleted. lull never force-deletes such a pod: a StatefulSet
// creates the successor of a pod's name only once the old one is gone
// from the API server, which is its at-most-one guarantee; removing it by
// force while the machine may still run it would break that. What lull
// does is say it: the Ready condition (reason NodeLost) names the pod, the
// node, its state and since when, an outstanding drain says its runtime
// cannot answer, and `lull status` lists it; docs/operations.md, "A node
// lost", gives the manual step.

// NodeLoss describes a pod's node that can no longer answer for it.
type NodeLoss struct {
	// Node is the node's name (the pod's spec.nodeName).
	Node string
	// Gone: the Node is deleted (a live read returned NotFound).
	Gone bool
	// Status is the node's Ready condition status (False or Unknown)
	// and Reason its reason (NodeStatusUnknown when the node lifecycle
	// controller stopped hearing the kubelet); both empty when Gone.
	Status corev1.ConditionStatus
	Reason string
	// Since is the Ready condition's lastTransitionTime; zero when Gone
	// or not set.
	Since metav1.Time
}

// State is the node's state in a few words: "NotReady (Ready=Unknown,
// NodeStatusUnknown) since 2026-12-02T21:00:00Z", or "deleted".
func (l NodeLoss) State() string {
	if l.Gone {
		return "deleted"
	}
	s := fmt.Sprintf("NotReady (Ready=%s", l.Status)
	if l.Reason != "" {
		s += ", " + l.Reason
	}
	s += ")"
	if !l.Since.IsZero() {
		s += " since " + l.Since.UTC().Format(time.RFC3339)
	}
	return s
}

// NodeLost reports whether pod's node is lost: the pod is bound to a node
// (spec.nodeName) and that node's Ready condition is False or Unknown, or
// the node is gone. gone must come from a live read of the Node that
// returned NotFound, never from the cache alone (it may lag behind a node
// just created); a nil node that is not gone is one not known, not lost. A
// node with no Ready condition yet (just registered) is not judged lost.
func NodeLost(node *corev1.Node, pod *corev1.Pod, gone bool) (NodeLoss, bool) {
	if pod == nil || pod.Spec.NodeName == "" {
		return NodeLoss{}, false
	}
	if node == nil {
		if gone {
			return NodeLoss{Node: pod.Spec.NodeName, Gone: true}, true
		}
		return NodeLoss{}, false
	}
	for _, c := range node.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if c.Status == corev1.ConditionTrue {
			return NodeLoss{}, false
		}
		return NodeLoss{Node: node.Name, Status: c.Status, Reason: c.Reason, Since: c.LastTransitionTime}, true
	}
	return NodeLoss{}, false
}

// nodeLost is NodeLost of o's pod.
func (o Observed) nodeLost() (NodeLoss, bool) {
	return NodeLost(o.Node, o.Pod, o.NodeGone)
}

// nodeLostMessage is the Ready condition's message for a pod on a lost
// node: what, since when, that lull does not force anything, and the
// manual step.
func nodeLostMessage(pod *corev1.Pod, l NodeLoss) string {
	return fmt.Sprintf("pod %s is bound to node %s, which is %s: its runtime cannot answer; "+
		"lull never force-deletes the pod (the StatefulSet keeps at most one pod of its name only while nobody does so with the machine still running it): "+
		"once the machine is known to be gone, delete the Node (kubectl delete node %s), see docs/operations.md#a-node-lost",
		pod.Name, l.Node, l.State(), l.Node)
}

// nodeLostDrainNote is what an outstanding drain of a pod on a lost node
// adds to its messages, so that it does not wait in silence: nobody will
// answer it while the node is lost, and only its deadline (a replacement
// committed and the pod deleted by UID, which leaves it Terminating on the
// lost node until the Node goes) or the manual step moves it.
func nodeLostDrainNote(pod *corev1.Pod, l NodeLoss) string {
	return fmt.Sprintf("; the runtime of pod %s cannot answer: its node %s is %s (see the Ready condition)", pod.Name, l.Node, l.State())
}
