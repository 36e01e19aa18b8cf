package e2e

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	kubectldrain "k8s.io/kubectl/pkg/drain"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
	"lull.dev/lull/internal/dev/audit"
	"lull.dev/lull/internal/dev/devcluster"
	"lull.dev/lull/internal/dev/journal"
)

// drainBusy keeps a session's runtime in turns of a few seconds one after
// the other: most turns outlast kubectl's first retries, so a session
// refuses its eviction more than once before it has drained.
var drainBusy = []string{"--turn-min=2s", "--turn-max=8s", "--think-max=200ms"}

// poolLabel labels and taints the simulated nodes a test adds for its own
// sessions (onPool).
const poolLabel = "e2e.lull.dev/pool"

// karpenterDisrupted is the taint Karpenter puts on a node it is about to
// disrupt (consolidation, drift, expiry) before it evicts the node's pods.
const karpenterDisrupted = "karpenter.sh/disrupted"

// kubectlRetryDelay is what `kubectl drain` waits after a refused
// eviction before it re-reads the pod by name and tries again (its
// EvictErrorRetryDelay default).
const kubectlRetryDelay = 5 * time.Second

// `kubectl drain` of a node holding busy sessions, with another node to go
// to, completes: the budget refuses every eviction until the session's
// runtime has drained, lull hands the drained pod to kubectl, and the
// session runs on the other node. No turn is interrupted and turns go on
// completing while the node drains.
func TestKubectlDrainMovesBusySessions(t *testing.T) {
	nodes := poolNodes(t, "drain", 2)
	from, to := nodes[0], nodes[1]
	ns, names, _ := setupTemplate(t, 6, onPool("drain"), drainBusy...)
	onNode(t, ns, names, from)
	uncordon(t, to)
	everyTurnBegun(t, ns, names)

	refused := &lineCounter{w: testWriter{t}, substr: "will retry after"}
	h := kubectlHelper(t, testWriter{t}, refused)
	start := time.Now()
	if err := kubectldrain.RunCordonOrUncordon(h, node(t, from), true); err != nil {
		t.Fatalf("cordon %s: %v", from, err)
	}
	t.Cleanup(func() { uncordon(t, from) })
	if err := kubectldrain.RunNodeDrain(h, from); err != nil {
		t.Fatalf("kubectl drain %s: %v", from, err)
	}
	end := time.Now()
	t.Logf("kubectl drain %s completed in %s; %d evictions refused and retried", from, end.Sub(start).Round(time.Millisecond), refused.n.Load())

	movedTo(t, ns, names, to)
	judgeNodeDrain(t, ns, names, start, end)
	if refused.n.Load() == 0 {
		t.Error("no eviction was refused: the budget did not stand between kubectl drain and busy runtimes")
	}
}

// An autoscaler-like client (Karpenter's termination: taint the node with
// karpenter.sh/disrupted, then evict each of its pods with the pod's UID
// as precondition, a refusal (429) retried) empties the node the same way:
// every session drained and moved, no turn interrupted.
func TestDisruptionTaintAndEvictLoop(t *testing.T) {
	nodes := poolNodes(t, "evict", 2)
	from, to := nodes[0], nodes[1]
	ns, names, _ := setupTemplate(t, 6, onPool("evict"), drainBusy...)
	onNode(t, ns, names, from)
	uncordon(t, to)
	everyTurnBegun(t, ns, names)

	start := time.Now()
	setTaint(t, from, corev1.Taint{Key: karpenterDisrupted, Effect: corev1.TaintEffectNoSchedule}, true)
	t.Cleanup(func() {
		setTaint(t, from, corev1.Taint{Key: karpenterDisrupted, Effect: corev1.TaintEffectNoSchedule}, false)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	refused, err := evictLoop(ctx, t, clientset(t), from)
	if err != nil {
		t.Fatalf("evicting the pods of %s: %v", from, err)
	}
	end := time.Now()
	t.Logf("node %s emptied in %s; %d evictions refused and retried", from, end.Sub(start).Round(time.Millisecond), refused)

	movedTo(t, ns, names, to)
	judgeNodeDrain(t, ns, names, start, end)
	if refused == 0 {
		t.Error("no eviction was refused: the budget did not stand between the evictor and busy runtimes")
	}
}

// A node cordoned under a session holding a long turn gets the session a
// NodeDrain request naming the node; uncordoned before the runtime has
// drained, the request is withdrawn: the runtime reopens and takes its next
// turn in the same pod, and nothing is deleted.
func TestUncordonWithdrawsNodeDrain(t *testing.T) {
	from := poolNodes(t, "uncordon", 1)[0]
	ns, names, _ := setupTemplate(t, 1, onPool("uncordon"), "--turn-min=20s", "--turn-max=20s", "--think-max=0s")
	name := names[0]
	onNode(t, ns, names, from)
	p1 := pod(t, ns, name)
	eventually(t, 10*time.Second, "the long turn begins", func() error { return openTurn(t, p1.UID) })

	h := kubectlHelper(t, testWriter{t}, testWriter{t})
	if err := kubectldrain.RunCordonOrUncordon(h, node(t, from), true); err != nil {
		t.Fatalf("cordon %s: %v", from, err)
	}
	t.Cleanup(func() { uncordon(t, from) })
	eventually(t, 10*time.Second, "a NodeDrain request naming the node, the runtime draining", func() error {
		s := session(t, ns, name)
		d := s.Status.Drain
		if d == nil || d.Reason != lullv1.DrainReasonNodeDrain || d.Node != from || d.PodUID != p1.UID {
			return fmt.Errorf("drain = %+v", d)
		}
		if r := s.Status.Runtime; r == nil || r.State != lullv1.RuntimeDraining || r.PodUID != p1.UID {
			return fmt.Errorf("runtime %+v", r)
		}
		return nil
	})

	if err := kubectldrain.RunCordonOrUncordon(h, node(t, from), false); err != nil {
		t.Fatalf("uncordon %s: %v", from, err)
	}
	uncordoned := time.Now()
	eventually(t, 10*time.Second, "the request withdrawn, the runtime serving again", func() error {
		s := session(t, ns, name)
		if s.Status.Drain != nil {
			return fmt.Errorf("drain still requested: %+v", s.Status.Drain)
		}
		if r := s.Status.Runtime; r == nil || r.State != lullv1.RuntimeServing || r.PodUID != p1.UID {
			return fmt.Errorf("runtime %+v", r)
		}
		return nil
	})
	eventually(t, 40*time.Second, "the runtime takes its next turn in the same pod", func() error {
		for _, tr := range turnsOn(t, p1.UID) {
			if tr.Began.After(uncordoned) {
				return nil
			}
		}
		return fmt.Errorf("no turn begun on pod %s since the uncordon", p1.UID)
	})
	if p := pod(t, ns, name); p == nil || p.UID != p1.UID || p.DeletionTimestamp != nil {
		t.Fatalf("pod %s was replaced or is being deleted: %+v", p1.UID, p)
	}
	rep := check(t, ns)
	if len(rep.Deletions) != 0 {
		t.Errorf("pods deleted after an uncordon before the drain: %+v", rep.Deletions)
	}
}

// poolNodes adds n simulated nodes for the calling test alone,
// kwok-<pool>-<i>, labelled and tainted poolLabel=pool: only the pods of a
// template placed with onPool(pool) land there. The first is schedulable,
// the others start cordoned, so the sessions all begin on the first. A
// test drains a node of its own, not the environment's shared node: that
// one holds every other test's sessions, some of them in turns that never
// end, and a drain of it would move (or wait on) them all.
func poolNodes(t *testing.T, pool string, n int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("kwok-%s-%d", pool, i)
		node := devcluster.SimulatedNode(names[i])
		node.Labels[poolLabel] = pool
		node.Spec.Taints = []corev1.Taint{{Key: poolLabel, Value: pool, Effect: corev1.TaintEffectNoSchedule}}
		node.Spec.Unschedulable = i > 0
		if err := env.Cluster.AddNode(ctx, node); err != nil {
			t.Fatal(err)
		}
	}
	return names
}

// onPool places a template's pods on the nodes of pool.
func onPool(pool string) func(*lullv1.SessionTemplate) {
	return func(tmpl *lullv1.SessionTemplate) {
		spec := &tmpl.Spec.Template.Spec
		spec.NodeSelector = map[string]string{poolLabel: pool}
		spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Key: poolLabel, Operator: corev1.TolerationOpEqual, Value: pool, Effect: corev1.TaintEffectNoSchedule})
	}
}

func clientset(t *testing.T) kubernetes.Interface {
	t.Helper()
	cfg := *env.Cluster.Config
	// kubectl's own client rates.
	cfg.QPS, cfg.Burst = 50, 300
	cs, err := kubernetes.NewForConfig(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// kubectlHelper is the drain helper as `kubectl drain` fills it by
// default (--grace-period=-1, --timeout bounded here, the 5 s retry delay
// after a refused eviction), with --ignore-daemonsets and
// --delete-emptydir-data.
func kubectlHelper(t *testing.T, out, errOut io.Writer) *kubectldrain.Helper {
	return &kubectldrain.Helper{
		Ctx:                  context.Background(),
		Client:               clientset(t),
		GracePeriodSeconds:   -1,
		IgnoreAllDaemonSets:  true,
		DeleteEmptyDirData:   true,
		Timeout:              4 * time.Minute,
		EvictErrorRetryDelay: kubectlRetryDelay,
		Out:                  out,
		ErrOut:               errOut,
	}
}

func node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := clientset(t).CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// uncordon makes a node schedulable, as `kubectl uncordon` does.
func uncordon(t *testing.T, name string) {
	t.Helper()
	if err := kubectldrain.RunCordonOrUncordon(kubectlHelper(t, testWriter{t}, testWriter{t}), node(t, name), false); err != nil {
		t.Fatalf("uncordon %s: %v", name, err)
	}
}

// setTaint adds taint to a node, or removes it.
func setTaint(t *testing.T, name string, taint corev1.Taint, on bool) {
	t.Helper()
	edit(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, func(n *corev1.Node) {
		kept := n.Spec.Taints[:0]
		for _, x := range n.Spec.Taints {
			if x.Key != taint.Key || x.Effect != taint.Effect {
				kept = append(kept, x)
			}
		}
		if on {
			kept = append(kept, taint)
		}
		n.Spec.Taints = kept
	})
}

// onNode fails the test unless every session's pod runs on node.
func onNode(t *testing.T, ns string, names []string, node string) {
	t.Helper()
	for _, name := range names {
		if p := pod(t, ns, name); p == nil || p.Spec.NodeName != node {
			t.Fatalf("session %s does not start on %s: pod %v", name, node, p)
		}
	}
}

// everyTurnBegun waits until every session's runtime has begun a turn:
// the node is drained under busy sessions, not under runtimes still
// starting.
func everyTurnBegun(t *testing.T, ns string, names []string) {
	t.Helper()
	eventually(t, 20*time.Second, "every session has begun a turn", func() error {
		for _, name := range names {
			p := pod(t, ns, name)
			if p == nil || len(turnsOn(t, p.UID)) == 0 {
				return fmt.Errorf("no turn yet on session %s", name)
			}
		}
		return nil
	})
}

// movedTo waits until every session runs on node, its pod Ready.
func movedTo(t *testing.T, ns string, names []string, node string) {
	t.Helper()
	eventually(t, 2*time.Minute, "every session runs on "+node+", Ready", func() error {
		for _, name := range names {
			p := pod(t, ns, name)
			if p == nil || p.DeletionTimestamp != nil || p.Spec.NodeName != node || !podReady(p) {
				return fmt.Errorf("session %s: pod %s", name, describePod(p))
			}
		}
		return nil
	})
}

// judgeNodeDrain checks what the auditor saw of a node drain between
// start and end: one deletion per session, each after a Drained report
// answering a NodeDrain request, none while a turn was open on the pod, no
// turn interrupted, and turns completed while the node drained (turns
// were open when it began).
func judgeNodeDrain(t *testing.T, ns string, names []string, start, end time.Time) {
	t.Helper()
	rep := check(t, ns)
	if len(rep.Interrupted) != 0 {
		t.Errorf("%d turns interrupted: %+v", len(rep.Interrupted), rep.Interrupted)
	}
	entries, err := journal.ReadDir(env.Runner.JournalDir())
	if err != nil {
		t.Fatal(err)
	}
	turns, _ := journal.Turns(entries)
	openAtStart, completedDuring := 0, 0
	for _, tr := range turns {
		if tr.Namespace != ns {
			continue
		}
		if tr.Began.Before(start) && (tr.Ended.IsZero() || tr.Ended.After(start)) {
			openAtStart++
		}
		if !tr.Ended.IsZero() && tr.Ended.After(start) && tr.Ended.Before(end) {
			completedDuring++
		}
	}
	t.Logf("%d turns open when the node began draining, %d completed while it drained", openAtStart, completedDuring)
	if openAtStart == 0 || completedDuring == 0 {
		t.Errorf("the node did not drain under busy sessions: %d turns open at its start, %d completed during it", openAtStart, completedDuring)
	}

	deleted := map[string]int{}
	for _, d := range rep.Deletions {
		deleted[d.Session]++
		reason, _, err := drain.ParseRequestID(d.RequestID)
		if !d.Drained || err != nil || reason != lullv1.DrainReasonNodeDrain || d.Forced || d.DeadlinePassed || d.Failed {
			t.Errorf("pod %s of session %s deleted without its runtime having drained for a NodeDrain request: %+v", d.PodUID, d.Session, d)
		}
		for _, tr := range turns {
			if tr.PodUID == d.PodUID && tr.Began.Before(d.At) && (tr.Ended.IsZero() || tr.Ended.After(d.At)) {
				t.Errorf("pod %s of session %s deleted at %s while turn %d (begun %s) was held", d.PodUID, d.Session, d.At.Format(time.StampMilli), tr.Turn, tr.Began.Format(time.StampMilli))
			}
		}
	}
	for _, name := range names {
		if deleted[name] != 1 {
			t.Errorf("session %s: %d pod deletions, want 1 (its pod on the drained node)", name, deleted[name])
		}
	}
}

// check is the auditor's report on ns, its violations failing the test.
func check(t *testing.T, ns string) audit.Report {
	t.Helper()
	rep, err := auditor.Check(env.Runner.JournalDir(), ns)
	if err != nil {
		t.Fatalf("audit: %v", err)
	}
	for _, v := range rep.Violations {
		t.Errorf("audit violation: %s", v)
	}
	return rep
}

// evictLoop empties node as Karpenter's terminator does: each pod on it
// is evicted with its UID as precondition (the pod seen, not whatever
// pod has its name by then); a refusal (429) is tried again a second
// later; a pod gone (404) or replaced (409, the precondition failed) is
// done with. It returns once no pod is left on the node, with the number
// of refusals.
func evictLoop(ctx context.Context, t *testing.T, cs kubernetes.Interface, node string) (refused int, err error) {
	for {
		pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
		if err != nil {
			return refused, err
		}
		if len(pods.Items) == 0 {
			return refused, nil
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue // evicted, terminating
			}
			uid := p.UID
			err := cs.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{
				ObjectMeta:    metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name},
				DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
			})
			switch {
			case err == nil:
				t.Logf("evicted pod %s/%s (%s)", p.Namespace, p.Name, uid)
			case apierrors.IsTooManyRequests(err):
				refused++
			case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			default:
				return refused, fmt.Errorf("evict pod %s/%s (%s): %w", p.Namespace, p.Name, uid, err)
			}
		}
		select {
		case <-ctx.Done():
			return refused, fmt.Errorf("%d pods left on %s: %w", len(pods.Items), node, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func describePod(p *corev1.Pod) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprintf("%s on %q, phase %s, ready %v, deleting %v", p.UID, p.Spec.NodeName, p.Status.Phase, podReady(p), p.DeletionTimestamp != nil)
}

// lineCounter passes what is written to w and counts the writes that
// contain substr (kubectl's drain helper writes one line per write).
type lineCounter struct {
	w      io.Writer
	substr string
	n      atomic.Int64
}

func (c *lineCounter) Write(b []byte) (int, error) {
	if strings.Contains(string(b), c.substr) {
		c.n.Add(1)
	}
	return c.w.Write(b)
}
