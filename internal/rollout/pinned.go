package rollout

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// PinnedRecheck is how often a session pinned to its disrupted node
// (PinnedTo) is looked at again: a node joining the volume's zone, or
// another uncordoned, reconciles only the sessions on that node, so the
// pinned one would not otherwise notice that its volume can now follow it.
const PinnedRecheck = time.Minute

// BoundVolume is one of a pod's PersistentVolumeClaims and the
// PersistentVolume bound to it (nil while it is unbound or not known).
type BoundVolume struct {
	Claim  string
	Volume *corev1.PersistentVolume
}

// Pin names the claim, and its volume, that holds a pod on its node: the
// volume's node affinity matches that node and no other node the pod's
// successor could be scheduled to.
type Pin struct {
	Claim, Volume, Node string
}

// PinnedTo returns the first of volumes whose PersistentVolume's
// spec.nodeAffinity.required matches node and none of the other
// schedulable nodes (not cordoned, no drain's taint; NodeDisruption), if
// any: a pod of that claim drained off node would be replaced by a pod
// that can never start (a local volume's hostname affinity, a zonal disk
// whose zone has no other schedulable node). A volume with no required
// affinity follows the pod anywhere; one whose affinity cannot be parsed
// (the API server validates it) or does not match node itself is not
// judged a pin: lull only holds back what it knows to be stuck. The
// matching is the scheduler's own (k8s.io/component-helpers), not lull's.
func PinnedTo(node *corev1.Node, volumes []BoundVolume, nodes []corev1.Node) (Pin, bool) {
	if node == nil {
		return Pin{}, false
	}
	for _, v := range volumes {
		pv := v.Volume
		if pv == nil || pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
			continue
		}
		sel, err := nodeaffinity.NewNodeSelector(pv.Spec.NodeAffinity.Required)
		if err != nil || !sel.Match(node) {
			continue
		}
		elsewhere := false
		for i := range nodes {
			n := &nodes[i]
			if n.Name == node.Name {
				continue
			}
			if _, disrupted := NodeDisruption(n, nil); !disrupted && sel.Match(n) {
				elsewhere = true
				break
			}
		}
		if !elsewhere {
			return Pin{Claim: v.Claim, Volume: pv.Name, Node: node.Name}, true
		}
	}
	return Pin{}, false
}

// String says what holds the pod and what to do about it.
func (p Pin) String() string {
	return fmt.Sprintf("PersistentVolumeClaim %s is bound to PersistentVolume %s, whose node affinity matches node %s and no other schedulable node: "+
		"a replacement elsewhere could never start, so lull does not drain the session for the node's drain and its budget keeps refusing evictions "+
		"(the running turn is protected); to move it, make a node the volume can reach schedulable, or suspend or delete the session (its data stays on the volume), "+
		"or uncordon node %s", p.Claim, p.Volume, p.Node, p.Node)
}
