package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// setNodeReady writes node's Ready condition (status, reason), as the
// kubelet or the node lifecycle controller does, on the status
// subresource.
func setNodeReady(t *testing.T, node string, status corev1.ConditionStatus, reason string) {
	t.Helper()
	eventually(t, 10*time.Second, "write the node's Ready condition", func(ctx context.Context) error {
		n := &corev1.Node{}
		if err := admin.Get(ctx, types.NamespacedName{Name: node}, n); err != nil {
			return err
		}
		now := metav1.Now()
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: reason, LastHeartbeatTime: now, LastTransitionTime: now}}
		return admin.Status().Update(ctx, n)
	})
}

// A node made NotReady (Ready=Unknown, NodeStatusUnknown) under a busy
// session: the Ready condition names the node and its state, the pod is
// not deleted; Ready again, the session is Ready again; the Node deleted,
// the condition says so, and still nothing is deleted.
func TestNodeLostIsNamedNeverForced(t *testing.T) {
	t.Parallel()
	ns := startManager(t)
	n := runs.Add(1)
	node := fmt.Sprintf("nodeloss-%s-%d", ns, n)
	createNode(t, node)
	setNodeReady(t, node, corev1.ConditionTrue, "KubeletReady")
	ds := startNodeDrainSession(t, ns, fmt.Sprintf("nl%d", n), node)

	setNodeReady(t, node, corev1.ConditionUnknown, "NodeStatusUnknown")
	waitStatus(t, ns, ds.name, "Ready names the lost node", func(st lullv1.SessionStatus) bool {
		c := meta.FindStatusCondition(st.Conditions, lullv1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == lullv1.ReasonNodeLost &&
			strings.Contains(c.Message, "node "+node+", which is NotReady (Ready=Unknown, NodeStatusUnknown) since") && strings.Contains(c.Message, "never force-deletes")
	})
	podKept := func() {
		t.Helper()
		pod := &corev1.Pod{}
		if err := admin.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: ds.pod.Name}, pod); err != nil || pod.UID != ds.pod.UID || pod.DeletionTimestamp != nil {
			t.Fatalf("pod %s: %v (deleting %v); want it kept, not deleted", ds.pod.Name, err, pod.DeletionTimestamp)
		}
	}
	podKept()

	setNodeReady(t, node, corev1.ConditionTrue, "KubeletReady")
	waitStatus(t, ns, ds.name, "Ready again with its node", func(st lullv1.SessionStatus) bool {
		c := meta.FindStatusCondition(st.Conditions, lullv1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue
	})

	if err := admin.Delete(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, ns, ds.name, "Ready says the node is deleted", func(st lullv1.SessionStatus) bool {
		c := meta.FindStatusCondition(st.Conditions, lullv1.ConditionReady)
		return c != nil && c.Reason == lullv1.ReasonNodeLost && strings.Contains(c.Message, "node "+node+", which is deleted")
	})
	podKept()
}
