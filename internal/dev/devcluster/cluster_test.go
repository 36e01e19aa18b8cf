package devcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"lull.dev/lull/internal/dev/testenv"
)

// logWriter sends progress lines to the test log.
type logWriter struct {
	t      *testing.T
	prefix string
}

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(w.prefix + strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// startCluster starts a cluster that is stopped when the test ends. It
// fails (never skips) when the binaries are missing.
func startCluster(t *testing.T, prefix string) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{StateDir: t.TempDir(), Progress: logWriter{t, prefix}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	return c
}

// eventually is testenv.EventuallyContext: cond gets a context that ends
// with the wait.
var eventually = testenv.EventuallyContext

func TestStartRunsPods(t *testing.T) {
	c := startCluster(t, "")
	ctx := t.Context()

	t0 := time.Now()
	if err := InstallCRDs(ctx, c.Config); err != nil {
		t.Fatal(err)
	}
	t.Logf("CRDs installed (%.1fs)", time.Since(t0).Seconds())
	dyn := dynamic.NewForConfigOrDie(c.Config)
	if _, err := dyn.Resource(schema.GroupVersionResource{Group: "lull.dev", Version: "v1alpha1", Resource: "sessions"}).
		Namespace("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("list sessions after InstallCRDs: %v", err)
	}
	if err := InstallCRDs(ctx, c.Config); err != nil {
		t.Fatalf("InstallCRDs again: %v", err)
	}

	client := kubernetes.NewForConfigOrDie(c.Config)
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:       ptr.To[int32](1),
			ServiceName:    "web",
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "runtime", Image: "example.invalid/runtime:v1"}}},
			},
		},
	}
	t0 = time.Now()
	if _, err := client.AppsV1().StatefulSets("default").Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := client.CoreV1().Pods("default")
	var first *corev1.Pod
	eventually(t, 30*time.Second, "pod web-0 Running", func(ctx context.Context) error {
		p, err := pods.Get(ctx, "web-0", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %q", p.Status.Phase)
		}
		first = p
		return nil
	})
	t.Logf("pod web-0 Running on %s (%.1fs after StatefulSet create)", first.Spec.NodeName, time.Since(t0).Seconds())
	if first.Spec.NodeName != c.NodeName {
		t.Errorf("pod on node %q, want %q", first.Spec.NodeName, c.NodeName)
	}
	if !hasServiceAccountToken(first) {
		t.Errorf("pod has no projected service account token volume: %+v", first.Spec.Volumes)
	}
	oldHash := first.Labels[appsv1.ControllerRevisionHashLabelKey]

	// Change the template: with OnDelete the pod keeps its revision.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := client.AppsV1().StatefulSets("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec.Template.Spec.Containers[0].Image = "example.invalid/runtime:v2"
		_, err = client.AppsV1().StatefulSets("default").Update(ctx, s, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var updateRevision string
	eventually(t, 20*time.Second, "updateRevision moves", func(ctx context.Context) error {
		s, err := client.AppsV1().StatefulSets("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if s.Status.ObservedGeneration < s.Generation || s.Status.UpdateRevision == oldHash || s.Status.UpdateRevision == "" {
			return fmt.Errorf("status %+v", s.Status)
		}
		updateRevision = s.Status.UpdateRevision
		return nil
	})
	if p, err := pods.Get(ctx, "web-0", metav1.GetOptions{}); err != nil || p.UID != first.UID || p.Labels[appsv1.ControllerRevisionHashLabelKey] != oldHash {
		t.Fatalf("OnDelete pod changed before deletion: %v %v", err, p.Labels)
	}

	// Delete: kwok finishes the deletion at once, the controller recreates
	// the pod at the new revision.
	t0 = time.Now()
	if err := pods.Delete(ctx, "web-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "old pod gone", func(ctx context.Context) error {
		p, err := pods.Get(ctx, "web-0", metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && p.UID != first.UID) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
	deleted := time.Since(t0)
	t.Logf("pod deletion completed in %s", deleted.Round(time.Millisecond))
	if deleted > 2*time.Second {
		t.Errorf("pod deletion took %s, want well under 2s", deleted)
	}
	var second *corev1.Pod
	eventually(t, 30*time.Second, "pod web-0 recreated Running at the update revision", func(ctx context.Context) error {
		p, err := pods.Get(ctx, "web-0", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.UID == first.UID || p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("uid %s phase %q", p.UID, p.Status.Phase)
		}
		second = p
		return nil
	})
	t.Logf("pod recreated and Running %s after delete", time.Since(t0).Round(time.Millisecond))
	if got := second.Labels[appsv1.ControllerRevisionHashLabelKey]; got != updateRevision {
		t.Errorf("new pod revision %q, want updateRevision %q", got, updateRevision)
	}
	if img := second.Spec.Containers[0].Image; img != "example.invalid/runtime:v2" {
		t.Errorf("new pod image %q", img)
	}

	// Owner-reference garbage collection: deleting the StatefulSet in the
	// background leaves its pod and revisions to the garbage collector.
	t0 = time.Now()
	if err := client.AppsV1().StatefulSets("default").Delete(ctx, "web", metav1.DeleteOptions{
		PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "garbage collection of the StatefulSet's pod and revisions", func(ctx context.Context) error {
		pl, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return err
		}
		rl, err := client.AppsV1().ControllerRevisions("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return err
		}
		if n := len(pl.Items) + len(rl.Items); n > 0 {
			return fmt.Errorf("%d pods, %d revisions left", len(pl.Items), len(rl.Items))
		}
		return nil
	})
	t.Logf("garbage collected in %s", time.Since(t0).Round(time.Millisecond))

	assertStopLeavesNothing(t, c)
}

func hasServiceAccountToken(p *corev1.Pod) bool {
	for _, v := range p.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, s := range v.Projected.Sources {
			if s.ServiceAccountToken != nil {
				return true
			}
		}
	}
	return false
}

// assertStopLeavesNothing stops c and checks that no process group it
// started and no process mentioning its state directory is left.
func assertStopLeavesNothing(t *testing.T, c *Cluster) {
	t.Helper()
	c.mu.Lock()
	procs := append([]*process(nil), c.procs...)
	c.mu.Unlock()
	if len(procs) != 5 {
		t.Errorf("started %d processes, want 5", len(procs))
	}
	t0 := time.Now()
	if err := c.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	t.Logf("stopped in %s", time.Since(t0).Round(time.Millisecond))
	if err := c.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	for _, p := range procs {
		if err := syscall.Kill(-p.pid(), 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process group of %s (%d) still exists: %v", p.name, p.pid(), err)
		}
	}
	if left := processesMentioning(c.StateDir); len(left) > 0 {
		t.Errorf("processes still running after Stop: %v", left)
	}
}

// processesMentioning lists /proc entries whose command line contains s.
func processesMentioning(s string) []string {
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var found []string
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err == nil && strings.Contains(string(b), s) {
			found = append(found, d+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return found
}

func TestTwoClustersDoNotCollide(t *testing.T) {
	// Also lose two port races: hand the first etcd and the first
	// single-port component a port that is already taken.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := busy.Addr().(*net.TCPAddr).Port
	taken := map[int]bool{}
	portHook = func(ports []int) []int {
		if !taken[len(ports)] {
			taken[len(ports)] = true
			ports[0] = busyPort
		}
		return ports
	}
	t.Cleanup(func() { portHook = nil })

	var (
		wg       sync.WaitGroup
		clusters [2]*Cluster
		errs     [2]error
	)
	t0 := time.Now()
	for i := range clusters {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			clusters[i], errs[i] = Start(ctx, Options{
				StateDir: t.TempDir(),
				Progress: logWriter{t, fmt.Sprintf("[%d] ", i)},
				NodeName: fmt.Sprintf("kwok-node-%d", i),
			})
		})
	}
	wg.Wait()
	for i, c := range clusters {
		if c != nil {
			t.Cleanup(func() { c.Stop() })
		}
		if errs[i] != nil {
			t.Fatalf("cluster %d: %v", i, errs[i])
		}
	}
	t.Logf("both clusters ready in %.1fs", time.Since(t0).Seconds())
	a, b := clusters[0], clusters[1]
	if a.Server == b.Server || a.EtcdURL == b.EtcdURL {
		t.Fatalf("clusters share endpoints: %s %s / %s %s", a.Server, a.EtcdURL, b.Server, b.EtcdURL)
	}

	ctx := t.Context()
	ca := kubernetes.NewForConfigOrDie(a.Config)
	cb := kubernetes.NewForConfigOrDie(b.Config)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "only-in-a", Namespace: "default"}}
	if _, err := ca.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cb.CoreV1().ConfigMaps("default").Get(ctx, "only-in-a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("cluster b sees cluster a's ConfigMap: %v", err)
	}
	for _, c := range clusters {
		nodes, err := kubernetes.NewForConfigOrDie(c.Config).CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes.Items) != 1 || nodes.Items[0].Name != c.NodeName {
			t.Errorf("cluster %s has nodes %v, want only %s", c.Server, nodes.Items, c.NodeName)
		}
	}
	// Each cluster's CA is its own: b's client is rejected by a.
	bad := *b.Config
	bad.Host = a.Server
	bad.TLSClientConfig.CAData = a.Config.TLSClientConfig.CAData
	if _, err := kubernetes.NewForConfigOrDie(&bad).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); !apierrors.IsUnauthorized(err) {
		t.Errorf("cluster a accepted cluster b's client certificate: %v", err)
	}

	var stopWG sync.WaitGroup
	for _, c := range clusters {
		stopWG.Go(func() { assertStopLeavesNothing(t, c) })
	}
	stopWG.Wait()
}
