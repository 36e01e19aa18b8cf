package devcluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// KWOK settings.
const (
	// kwokNodeAnnotation marks the nodes kwok manages.
	kwokNodeAnnotation = "kwok.x-k8s.io/node"
	kwokNodeIP         = "10.0.0.1"
	kwokPodCIDR        = "10.244.0.0/16" // room for the node's 10,000 pods
)

// kwokStages are the Stage files (relative to the stage directory) kwok is
// given: nodes initialize and heartbeat with a lease, pods go Running
// (Succeeded for Jobs). Each entry is a list of alternatives; the first that
// exists is used. Pod deletion is podDeleteStage, not kwok's own.
var kwokStages = [][]string{
	{"node/fast/node-initialize.yaml"},
	{"node/heartbeat-with-lease/node-heartbeat-with-lease.yaml", "node/heartbeat/node-heartbeat.yaml"},
	{"pod/fast/pod-ready.yaml"},
	{"pod/fast/pod-complete.yaml"},
}

// podDeleteStage finishes the deletion of pods marked for deletion, except
// session pods (label lull.dev/session). kwok deletes by name without a UID
// precondition, and a StatefulSet recreates its pod under the same name: a
// delete kwok queued for the old pod can remove the new one, and under load
// it does, in a loop. Session pods are finished instead by the pod runner
// (package podprocess), as a kubelet does: runtime stopped, then a delete
// with grace period 0 and the pod's UID as precondition.
const podDeleteStage = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-delete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'Exists'
    - key: '.metadata.labels["lull.dev/session"]'
      operator: 'DoesNotExist'
  next:
    delete: true
`

// writeKwokConfig concatenates the Stage YAMLs into path.
func writeKwokConfig(stageDir, path string) error {
	var out bytes.Buffer
	for _, alternatives := range kwokStages {
		var data []byte
		var err error
		for _, rel := range alternatives {
			if data, err = os.ReadFile(filepath.Join(stageDir, rel)); err == nil {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("kwok stage %s: %w", alternatives[0], err)
		}
		out.WriteString("---\n")
		out.Write(bytes.TrimSpace(data))
		out.WriteString("\n")
	}
	out.WriteString("---\n" + podDeleteStage)
	return os.WriteFile(path, out.Bytes(), 0o644)
}

// startKwokAndNode starts kwok, registers the simulated node and waits until
// it is Ready with no taints left (the node lifecycle controller of
// kube-controller-manager removes the not-ready taint).
func (c *Cluster) startKwokAndNode(ctx context.Context, client kubernetes.Interface) error {
	t := time.Now()
	logPath := c.LogPath(ComponentKwok)
	config := c.path("kwok.yaml")
	if err := writeKwokConfig(c.Binaries.KwokStages, config); err != nil {
		return &StartError{Step: ComponentKwok, Err: err}
	}
	// No --server-address and no --node-port: kwok opens no listener.
	p, err := c.run(ComponentKwok, c.Binaries.Kwok, []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--config=" + config,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + kwokNodeAnnotation + "=fake",
		"--node-ip=" + kwokNodeIP,
		"--cidr=" + kwokPodCIDR,
		"--node-lease-duration-seconds=40",
	})
	if err != nil {
		return &StartError{Step: ComponentKwok, Log: logPath, Err: err}
	}
	c.progress("kwok started", t)

	t = time.Now()
	if err := c.registerNode(ctx, client, SimulatedNode(c.NodeName), p, readyTimeout); err != nil {
		return err
	}
	c.progress("node %s Ready and schedulable", t, c.NodeName)
	return nil
}

// AddNode registers one more simulated node, node (a SimulatedNode, which
// the caller may label, taint or mark unschedulable first), and waits
// until kwok has made it Ready and the control plane has lifted its
// not-ready taint. kwok manages every node with the annotation, and the
// pod runner runs the pods of every node but the real one, so sessions
// scheduled there run as on the first node: this is how a test moves
// sessions from one node to another (a drain). A node that already exists
// is waited for, not changed.
func (c *Cluster) AddNode(ctx context.Context, node *corev1.Node) error {
	client, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	kwok, _ := c.running(ComponentKwok)
	return c.registerNode(ctx, client, node, kwok, readyTimeout)
}

// registerNode creates node unless it exists and waits, up to timeout,
// until it is Ready and schedulable; kwok (p, when not nil) exiting ends
// the wait. The error is a *StartError naming the node.
func (c *Cluster) registerNode(ctx context.Context, client kubernetes.Interface, node *corev1.Node, p *process, timeout time.Duration) error {
	step := "node " + node.Name
	if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return &StartError{Step: step, Err: err}
	}
	err := waitReady(ctx, p, timeout, func(ctx context.Context) error {
		node, err := client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return nodeSchedulable(node)
	})
	if err != nil {
		return &StartError{Step: step, Log: c.LogPath(ComponentKwok), Err: fmt.Errorf("%w (kwok makes it Ready; kube-controller-manager's node lifecycle controller removes the not-ready taint: %s)", err, c.LogPath(ComponentControllerManager))}
	}
	return nil
}

// SimulatedNode is a node kwok manages (the annotation), named name, of
// the shape of the environment's first node: room for thousands of pods.
func SimulatedNode(name string) *corev1.Node {
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("256"),
		corev1.ResourceMemory: resource.MustParse("1Ti"),
		// Room for lull bench --sessions 5000 and the pods a rollout
		// replaces at once.
		corev1.ResourcePods: resource.MustParse("10000"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{kwokNodeAnnotation: "fake"},
			Labels: map[string]string{
				"type":                   "kwok",
				"kubernetes.io/hostname": name,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     "amd64",
			},
		},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res},
	}
}

// nodeSchedulable returns nil once the node is Ready and carries none of
// the taints the control plane puts on nodes that are not ready.
func nodeSchedulable(node *corev1.Node) error {
	ready := slices.ContainsFunc(node.Status.Conditions, func(c corev1.NodeCondition) bool {
		return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
	})
	if !ready {
		return fmt.Errorf("node %s is not Ready", node.Name)
	}
	for _, t := range node.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return fmt.Errorf("node %s still has taint %s:%s", node.Name, t.Key, t.Effect)
		}
	}
	return nil
}
