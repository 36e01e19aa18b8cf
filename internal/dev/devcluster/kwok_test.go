package devcluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// Every simulated node carries the annotation kwok is started to manage
// (--manage-nodes-with-annotation-selector), so a node a test adds goes
// Ready as the first one does; the hostname label is its own name, as a
// kubelet would set it.
func TestSimulatedNodeIsManagedByKwok(t *testing.T) {
	for _, name := range []string{"kwok-node-0", "kwok-node-1"} {
		n := SimulatedNode(name)
		if n.Name != name || n.Annotations[kwokNodeAnnotation] != "fake" {
			t.Errorf("node %s: name %q, annotations %v: kwok does not manage it", name, n.Name, n.Annotations)
		}
		if got := n.Labels[corev1.LabelHostname]; got != name {
			t.Errorf("node %s: hostname label %q", name, got)
		}
		if n.Status.Allocatable.Pods().Value() < 10000 {
			t.Errorf("node %s: room for %d pods", name, n.Status.Allocatable.Pods().Value())
		}
	}
}

// An added node is waited for until it is Ready and the not-ready taint is
// gone, and is created as the caller shaped it (cordoned, tainted): a test
// that adds a node it means to keep empty for a while gets it so from the
// start, with no moment at which the scheduler could use it.
func TestAddedNodeIsWaitedForUntilSchedulable(t *testing.T) {
	cs := fake.NewClientset()
	c := &Cluster{StateDir: t.TempDir()}
	node := SimulatedNode("kwok-node-1")
	node.Spec.Unschedulable = true
	node.Spec.Taints = []corev1.Taint{{Key: "example.com/pool", Value: "a", Effect: corev1.TaintEffectNoSchedule}}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.registerNode(ctx, cs, node, nil, 5*time.Second) }()

	created := waitNode(t, cs, "kwok-node-1")
	if !created.Spec.Unschedulable || len(created.Spec.Taints) != 1 || created.Annotations[kwokNodeAnnotation] != "fake" {
		t.Fatalf("node created as %+v %v, not as the caller shaped it", created.Spec, created.Annotations)
	}
	// kwok marks it Ready; the node lifecycle controller has not yet
	// lifted the not-ready taint.
	created.Spec.Taints = append(created.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule})
	created.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if _, err := cs.CoreV1().Nodes().Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("returned (%v) while the node still had the not-ready taint", err)
	case <-time.After(300 * time.Millisecond):
	}
	created = waitNode(t, cs, "kwok-node-1")
	created.Spec.Taints = created.Spec.Taints[:1]
	if _, err := cs.CoreV1().Nodes().Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("node Ready with only the caller's taint: %v", err)
	}

	// Already there: waited for, not changed.
	again := SimulatedNode("kwok-node-1")
	if err := c.registerNode(ctx, cs, again, nil, time.Second); err != nil {
		t.Fatalf("existing node: %v", err)
	}
	if n := waitNode(t, cs, "kwok-node-1"); !n.Spec.Unschedulable {
		t.Error("registering an existing node changed it")
	}
}

// A node kwok never makes Ready fails the wait with an error naming the
// node and the logs to read.
func TestNodeNeverReadyNamesItAndTheLogs(t *testing.T) {
	cs := fake.NewClientset()
	c := &Cluster{StateDir: t.TempDir()}
	err := c.registerNode(t.Context(), cs, SimulatedNode("kwok-node-1"), nil, 200*time.Millisecond)
	var se *StartError
	if !errors.As(err, &se) || se.Step != "node kwok-node-1" || se.Log != c.LogPath(ComponentKwok) ||
		!strings.Contains(err.Error(), c.LogPath(ComponentControllerManager)) {
		t.Fatalf("error %v, want a StartError naming the node, kwok's log and kube-controller-manager's", err)
	}
}

func waitNode(t *testing.T, cs *fake.Clientset, name string) *corev1.Node {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := cs.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
		if err == nil {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s: %v", name, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
