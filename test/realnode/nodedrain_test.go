package realnode

import (
	"context"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	kubectldrain "k8s.io/kubectl/pkg/drain"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
	"lull.dev/lull/internal/dev/journal"
	"lull.dev/lull/internal/dev/scenario"
)

// `kubectl drain` of the real node (the drain package kubectl itself
// runs) under 6 busy sessions whose runtime and sidecar are real
// containers: the session budgets refuse every eviction (429) until the
// runtime inside the container has drained, kubectl's retries evict the
// pods lull hands off, the kubelet stops them within their grace period,
// and each session comes back on the KWOK node beside it; kubectl drain
// completes, no turn is interrupted, and every deletion followed a Drained
// report answering a NodeDrain request. The pods prefer the real node
// rather than being pinned to it, so the scheduler has somewhere to put
// them once it is cordoned.
func TestRealNodeKubectlDrainMovesBusySessions(t *testing.T) {
	requireNode(t)
	const ns, n = "real-drain", 6
	real, kwok := env.Cluster.RealNodeName, env.Cluster.NodeName
	tmpl := scenario.Template(ns, "mover", "example.com/lull/turnrunner:v1", "--turn-min=2s", "--turn-max=6s", "--think-max=200ms")
	tmpl.Spec.Agent = &lullv1.AgentSpec{}
	if err := env.OnRealNode(tmpl); err != nil {
		t.Fatal(err)
	}
	preferRealNode(tmpl, real)
	names, err := scenario.Launch(t.Context(), c, tmpl, "s", n)
	if err != nil {
		t.Fatal(err)
	}
	before, err := scenario.WaitFor(t.Context(), c, ns, names, 200*time.Millisecond, 3*time.Minute, nil, scenario.Converged)
	if err != nil {
		t.Fatalf("sessions did not start: %v", err)
	}
	for _, p := range pods(t, ns) {
		if p.Spec.NodeName != real {
			t.Fatalf("setup: pod %s started on %q, want the real node %s (it prefers it)", p.Name, p.Spec.NodeName, real)
		}
	}
	// Busy: every runtime has begun a turn on its pod (its journal).
	waitFor(t, time.Minute, "every session's runtime in its turns", func() bool {
		entries, err := journal.ReadDir(env.Runner.JournalDir())
		if err != nil {
			return false
		}
		turns, _ := journal.Turns(entries)
		begun := map[types.UID]bool{}
		for _, tr := range turns {
			begun[tr.PodUID] = true
		}
		for _, p := range before.Pods {
			if !begun[types.UID(p.UID)] {
				return false
			}
		}
		return true
	})

	cs, err := kubernetes.NewForConfig(env.Cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	refused := &retries{w: testLog{t}}
	h := &kubectldrain.Helper{
		Ctx:                  context.Background(),
		Client:               cs,
		GracePeriodSeconds:   -1, // kubectl's default: the pod's own grace period
		IgnoreAllDaemonSets:  true,
		DeleteEmptyDirData:   true,
		Timeout:              4 * time.Minute,
		EvictErrorRetryDelay: 5 * time.Second, // kubectl's default
		// Only this test's pods: the other tiers' sessions pinned to the
		// real node stay (lull drains them all the same while it is
		// cordoned; they return when it is uncordoned).
		PodSelector: lullv1.LabelTemplate + "=" + tmpl.Name,
		Out:         testLog{t},
		ErrOut:      refused,
	}
	node, err := cs.CoreV1().Nodes().Get(t.Context(), real, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	others := runningOn(t, cs, real, ns)
	start := time.Now()
	if err := kubectldrain.RunCordonOrUncordon(h, node, true); err != nil {
		t.Fatalf("cordon %s: %v", real, err)
	}
	t.Cleanup(func() { uncordonRealNode(t, cs, h, real, others) })
	if err := kubectldrain.RunNodeDrain(h, real); err != nil {
		t.Fatalf("kubectl drain %s: %v", real, err)
	}
	t.Logf("kubectl drain %s completed in %s; %d evictions refused and retried", real, time.Since(start).Round(time.Millisecond), refused.n.Load())
	if refused.n.Load() == 0 {
		t.Error("no eviction was refused: the budgets did not stand between kubectl drain and busy runtimes")
	}

	if _, err := scenario.WaitFor(t.Context(), c, ns, names, 200*time.Millisecond, 3*time.Minute, nil, newPods(before)); err != nil {
		t.Fatalf("the sessions did not come back: %v", err)
	}
	for _, p := range pods(t, ns) {
		if p.Spec.NodeName != kwok {
			t.Errorf("session pod %s runs on %q after the drain, want the KWOK node %s", p.Name, p.Spec.NodeName, kwok)
		}
	}
	rep, err := auditor.Check(env.Runner.JournalDir(), ns)
	if err != nil {
		t.Fatalf("audit: %v", err)
	}
	for _, v := range rep.Violations {
		t.Errorf("audit violation: %s", v)
	}
	if len(rep.Interrupted) > 0 {
		t.Errorf("%d turns interrupted: %+v", len(rep.Interrupted), rep.Interrupted)
	}
	deleted := map[string]int{}
	for _, d := range rep.Deletions {
		deleted[d.Session]++
		reason, _, err := drain.ParseRequestID(d.RequestID)
		if !d.Drained || err != nil || reason != lullv1.DrainReasonNodeDrain || d.Forced || d.DeadlinePassed || d.Failed {
			t.Errorf("pod %s of session %s deleted without its runtime having drained for a NodeDrain request: %+v", d.PodUID, d.Session, d)
		}
	}
	for _, name := range names {
		if deleted[name] != 1 {
			t.Errorf("session %s: %d pod deletions, want 1 (its pod on the drained real node)", name, deleted[name])
		}
	}
	t.Logf("audit: %d deletions, %d turns completed, 0 interrupted", len(rep.Deletions), rep.Completed)
}

// newPods is true once every session of before runs a new pod (its UID
// changed), converged: a node drain keeps the revision.
func newPods(before scenario.Fleet) func(scenario.Fleet) bool {
	return func(f scenario.Fleet) bool {
		if !f.Converged() {
			return false
		}
		for name, p := range f.Pods {
			if p.UID == before.Pods[name].UID {
				return false
			}
		}
		return true
	}
}

// preferRealNode turns OnRealNode's node selector into a preference: the
// pods start on the real node, and may go elsewhere once it is cordoned.
func preferRealNode(t *lullv1.SessionTemplate, real string) {
	spec := &t.Spec.Template.Spec
	delete(spec.NodeSelector, corev1.LabelHostname)
	spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
			Weight: 100,
			Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{real}}}},
		}},
	}}
}

// runningOn returns the pods Running on node outside namespace ns, by
// namespace/name: the other tiers' sessions the cordon will move.
func runningOn(t *testing.T, cs kubernetes.Interface, node, ns string) []string {
	list, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(t.Context(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Items {
		if p.Namespace != ns && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			names = append(names, p.Namespace+"/"+p.Name)
		}
	}
	return names
}

// uncordonRealNode makes the real node schedulable again and waits until
// each pod that ran there before the cordon (the other tiers' sessions,
// drained by lull while it was cordoned) runs again, so the tests after
// this one start from a settled node.
func uncordonRealNode(t *testing.T, cs kubernetes.Interface, h *kubectldrain.Helper, real string, others []string) {
	node, err := cs.CoreV1().Nodes().Get(context.Background(), real, metav1.GetOptions{})
	if err != nil {
		t.Errorf("uncordon %s: %v", real, err)
		return
	}
	if err := kubectldrain.RunCordonOrUncordon(h, node, false); err != nil {
		t.Errorf("uncordon %s: %v", real, err)
		return
	}
	waitFor(t, 3*time.Minute, "the real node's other pods running again after its uncordon", func() bool {
		for _, key := range others {
			ns, name, _ := strings.Cut(key, "/")
			p, err := cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
			if err != nil || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
				return false
			}
		}
		return true
	})
}

// retries passes kubectl's drain output to w and counts its refused
// evictions ("... will retry after 5s": one line per write).
type retries struct {
	w io.Writer
	n atomic.Int64
}

func (r *retries) Write(b []byte) (int, error) {
	if strings.Contains(string(b), "will retry after") {
		r.n.Add(1)
	}
	return r.w.Write(b)
}

// testLog writes each line to the test's log.
type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
