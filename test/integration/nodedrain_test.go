package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
	"lull.dev/lull/internal/rollout"
)

// nodeDrainSession is one session of the node drain tests: its template,
// Session, StatefulSet and the pod the test plays the StatefulSet
// controller and the kubelet for, on node.
type nodeDrainSession struct {
	ns, name, node string
	sts            *appsv1.StatefulSet
	pod            *corev1.Pod
}

// startNodeDrainSession creates a template (the default nodeDrainPolicy,
// Drain) and a session of it, publishes its StatefulSet's revision, and
// creates its pod on node, Running and Ready, its runtime serving a turn.
func startNodeDrainSession(t *testing.T, ns, name, node string) *nodeDrainSession {
	t.Helper()
	tpl := newTemplate(ns, name, "example.com/runtime:v1")
	if err := admin.Create(t.Context(), tpl); err != nil {
		t.Fatal(err)
	}
	s := newSession(ns, name, tpl.Name)
	if err := admin.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	ds := &nodeDrainSession{ns: ns, name: name, node: node, sts: &appsv1.StatefulSet{}}
	eventually(t, 10*time.Second, "StatefulSet is created", func(ctx context.Context) error {
		return admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, ds.sts)
	})
	setRevisions(t, ns, name, "rev-1", "rev-1")
	ds.pod = createPodOn(t, ds.sts, "rev-1", node)
	ds.report(t, &lullv1.RuntimeReport{PodUID: ds.pod.UID, State: lullv1.RuntimeServing, ActiveTurns: 1})
	waitStatus(t, ns, name, "the session runs its pod, a turn in flight", func(st lullv1.SessionStatus) bool {
		return st.PodUID == ds.pod.UID && st.Phase == lullv1.SessionRunning
	})
	return ds
}

// report writes the runtime's report as an admin (the controller reads any
// writer's status.runtime the same).
func (ds *nodeDrainSession) report(t *testing.T, r *lullv1.RuntimeReport) {
	t.Helper()
	patch, err := drain.EncodeReport(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Status().Patch(t.Context(), sessionRef(ds.ns, ds.name), client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
}

// evict asks the Eviction API to evict the session's pod, as kubectl
// drain does.
func (ds *nodeDrainSession) evict(ctx context.Context) error {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ds.ns, Name: ds.pod.Name}}
	return admin.SubResource("eviction").Create(ctx, pod, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ds.ns, Name: ds.pod.Name}})
}

// observeBudget plays kube-controller-manager's disruption controller for
// the session's budget: it publishes the budget's status for its
// generation, its one pod healthy and no disruption allowed. A budget whose
// status was never observed is refused with 429 too, but with a
// Retry-After that client-go waits out ten times over.
func (ds *nodeDrainSession) observeBudget(t *testing.T) {
	t.Helper()
	eventually(t, 10*time.Second, "publish the budget's status", func(ctx context.Context) error {
		pdb := &policyv1.PodDisruptionBudget{}
		if err := admin.Get(ctx, types.NamespacedName{Namespace: ds.ns, Name: ds.name}, pdb); err != nil {
			return err
		}
		pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, DisruptionsAllowed: 0,
			CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
		return admin.Status().Update(ctx, pdb)
	})
}

// createPodOn is createPod with the pod bound to node.
func createPodOn(t *testing.T, sts *appsv1.StatefulSet, revision, node string) *corev1.Pod {
	t.Helper()
	return createPodOnWith(t, sts, revision, node, nil)
}

// createPodOnWith is createPodOn with edit applied to the pod before its
// create.
func createPodOnWith(t *testing.T, sts *appsv1.StatefulSet, revision, node string, edit func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	name := sts.Name + "-0"
	labels := map[string]string{appsv1.ControllerRevisionHashLabelKey: revision, appsv1.StatefulSetPodNameLabel: name}
	for k, v := range sts.Spec.Template.Labels {
		labels[k] = v
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: sts.Namespace, Name: name, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}},
		Spec: *sts.Spec.Template.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = node
	if edit != nil {
		edit(pod)
	}
	if err := admin.Create(t.Context(), pod); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: lullv1.RuntimeContainerName, Image: pod.Spec.Containers[0].Image, Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		}},
	}
	if err := admin.Status().Update(t.Context(), pod); err != nil {
		t.Fatalf("write status of pod %s: %v", name, err)
	}
	return pod
}

// createNode creates a Node object (nothing runs it: envtest has no
// kubelet), schedulable.
func createNode(t *testing.T, name string) {
	t.Helper()
	if err := admin.Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = admin.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
}

// setUnschedulable cordons (true) or uncordons node, as kubectl cordon
// does.
func setUnschedulable(t *testing.T, node string, unschedulable bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, unschedulable)
	if err := admin.Patch(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, mergePatch(patch)); err != nil {
		t.Fatalf("cordon %s (%t): %v", node, unschedulable, err)
	}
}

// A session under nodeDrainPolicy Drain: its pod is guarded by a budget
// (an eviction is refused with 429 while it has not drained); a node
// cordoned asks its runtime to drain (NodeDrain, naming the node), an
// uncordon withdraws that; once Drained, the pod is labelled for the
// node's drain and an eviction of it succeeds; with nobody evicting, lull
// deletes it after the hand-off; a budget deleted by hand comes back with
// an Event.
func TestNodeDrain(t *testing.T) {
	t.Parallel()
	ns := startManager(t)
	n := runs.Add(1)
	node := fmt.Sprintf("nodedrain-%s-%d", ns, n)
	createNode(t, node)
	ds := startNodeDrainSession(t, ns, fmt.Sprintf("nd%d", n), node)
	key := types.NamespacedName{Namespace: ns, Name: ds.name}

	pdb := &policyv1.PodDisruptionBudget{}
	t.Run("the budget covers the session's undrained pod", func(t *testing.T) {
		eventually(t, 10*time.Second, "budget created", func(ctx context.Context) error { return admin.Get(ctx, key, pdb) })
		if got := metav1.FormatLabelSelector(pdb.Spec.Selector); got != "!"+lullv1.LabelDrained+","+lullv1.LabelSession+"="+ds.name {
			t.Errorf("selector %s; want the session's pod without %s", got, lullv1.LabelDrained)
		}
		if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 0 {
			t.Errorf("maxUnavailable %v; want 0", pdb.Spec.MaxUnavailable)
		}
		if ref := metav1.GetControllerOf(pdb); ref == nil || ref.Kind != "Session" || ref.Name != ds.name {
			t.Errorf("controller %+v; want the Session", ref)
		}
	})

	t.Run("an eviction of the undrained pod is refused with 429", func(t *testing.T) {
		ds.observeBudget(t)
		err := ds.evict(t.Context())
		if !apierrors.IsTooManyRequests(err) {
			t.Fatalf("eviction: %v; want 429 TooManyRequests", err)
		}
	})

	var first string
	t.Run("a cordoned node asks for a NodeDrain naming the node", func(t *testing.T) {
		setUnschedulable(t, node, true)
		st := waitStatus(t, ns, ds.name, "a NodeDrain request", func(st lullv1.SessionStatus) bool {
			return st.Drain != nil && st.Drain.Reason == lullv1.DrainReasonNodeDrain
		})
		if st.Drain.Node != node || st.Drain.PodUID != ds.pod.UID || st.Drain.Deadline == nil {
			t.Errorf("request %+v; want node %s, pod %s and a deadline", st.Drain, node, ds.pod.UID)
		}
		first = st.Drain.RequestID
	})

	t.Run("an uncordon before Drained withdraws the request", func(t *testing.T) {
		setUnschedulable(t, node, false)
		waitStatus(t, ns, ds.name, "the request withdrawn", func(st lullv1.SessionStatus) bool { return st.Drain == nil })
		if err := podGone(t.Context(), ds.pod); err == nil {
			t.Fatal("the pod was deleted by a withdrawn node drain")
		}
	})

	t.Run("Drained: the pod is handed to the node's drain and its eviction succeeds", func(t *testing.T) {
		setUnschedulable(t, node, true)
		st := waitStatus(t, ns, ds.name, "a new NodeDrain request", func(st lullv1.SessionStatus) bool {
			return st.Drain != nil && st.Drain.Reason == lullv1.DrainReasonNodeDrain && st.Drain.RequestID != first
		})
		id := st.Drain.RequestID
		// Still refused while the runtime drains.
		if err := ds.evict(t.Context()); !apierrors.IsTooManyRequests(err) {
			t.Fatalf("eviction while draining: %v; want 429", err)
		}
		ds.report(t, &lullv1.RuntimeReport{PodUID: ds.pod.UID, RequestID: id, State: lullv1.RuntimeDrained})
		eventually(t, 15*time.Second, "pod labelled for the hand-off", func(ctx context.Context) error {
			p := &corev1.Pod{}
			if err := admin.Get(ctx, client.ObjectKeyFromObject(ds.pod), p); err != nil {
				return err
			}
			if p.Labels[lullv1.LabelDrained] != id {
				return fmt.Errorf("labels %v", p.Labels)
			}
			return nil
		})
		if s := mustGetSession(t, ns, ds.name); s.Status.Replacement == nil || s.Status.Replacement.RequestID != id {
			t.Errorf("status.replacement %+v; want the commitment of %s", s.Status.Replacement, id)
		}
		if err := ds.evict(t.Context()); err != nil {
			t.Fatalf("eviction of the handed-off pod: %v; want it allowed", err)
		}
		eventually(t, 10*time.Second, "the evicted pod goes", func(ctx context.Context) error { return podGone(ctx, ds.pod) })
	})

	t.Run("a budget deleted by hand comes back with an Event", func(t *testing.T) {
		old := &policyv1.PodDisruptionBudget{}
		if err := admin.Get(t.Context(), key, old); err != nil {
			t.Fatal(err)
		}
		if err := admin.Delete(t.Context(), old); err != nil {
			t.Fatal(err)
		}
		eventually(t, 15*time.Second, "budget created again", func(ctx context.Context) error {
			p := &policyv1.PodDisruptionBudget{}
			if err := admin.Get(ctx, key, p); err != nil {
				return err
			}
			if p.UID == old.UID {
				return errors.New("still the old budget")
			}
			return nil
		})
		eventually(t, 10*time.Second, "DriftCorrected Event", func(ctx context.Context) error {
			return hasEvent(ctx, ns, lullv1.ReasonDriftCorrected, "PodDisruptionBudget")
		})
	})
}

// With nobody evicting (a node cordoned by hand, no drain running), a
// drained pod handed off is deleted by lull once rollout.NodeDrainHandoff
// has passed.
func TestNodeDrainHandOffWithNobodyEvictingDeletes(t *testing.T) {
	t.Parallel()
	ns := startManager(t)
	n := runs.Add(1)
	node := fmt.Sprintf("nodedrain-%s-%d", ns, n)
	createNode(t, node)
	ds := startNodeDrainSession(t, ns, fmt.Sprintf("nd%d", n), node)
	setUnschedulable(t, node, true)
	st := waitStatus(t, ns, ds.name, "a NodeDrain request", func(st lullv1.SessionStatus) bool {
		return st.Drain != nil && st.Drain.Reason == lullv1.DrainReasonNodeDrain
	})
	ds.report(t, &lullv1.RuntimeReport{PodUID: ds.pod.UID, RequestID: st.Drain.RequestID, State: lullv1.RuntimeDrained})
	var labelled time.Time
	eventually(t, 15*time.Second, "pod labelled", func(ctx context.Context) error {
		p := &corev1.Pod{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(ds.pod), p); err != nil {
			return err
		}
		if p.Labels[lullv1.LabelDrained] == "" {
			return errors.New("not labelled yet")
		}
		labelled = time.Now()
		return nil
	})
	eventually(t, rollout.NodeDrainHandoff+15*time.Second, "lull deletes the pod nobody evicted", func(ctx context.Context) error {
		return podGone(ctx, ds.pod)
	})
	if waited := time.Since(labelled); waited < rollout.NodeDrainHandoff-2*time.Second {
		t.Errorf("deleted %s after the hand-off; want no sooner than %s", waited, rollout.NodeDrainHandoff)
	}
}

// A user's budget that also selects a session pod makes every eviction of
// it fail (the Eviction API refuses a pod covered by two budgets): the
// Session names both budgets in its BudgetsOverlap condition, with a
// Warning Event, until the user's budget no longer selects it.
func TestNodeDrainOverlappingBudgetIsNamed(t *testing.T) {
	t.Parallel()
	ns := startManager(t)
	n := runs.Add(1)
	node := fmt.Sprintf("nodedrain-%s-%d", ns, n)
	createNode(t, node)
	ds := startNodeDrainSession(t, ns, fmt.Sprintf("nd%d", n), node)
	user := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("team-%d", n)},
		Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{lullv1.LabelSession: ds.name}}}}
	if err := admin.Create(t.Context(), user); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, ns, ds.name, "BudgetsOverlap names the user's budget", func(st lullv1.SessionStatus) bool {
		c := meta.FindStatusCondition(st.Conditions, lullv1.ConditionBudgetsOverlap)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, user.Name) && strings.Contains(c.Message, ds.name+" (lull's)")
	})
	eventually(t, 10*time.Second, "OverlappingBudgets Event", func(ctx context.Context) error {
		return hasEvent(ctx, ns, lullv1.ReasonOverlappingBudgets, user.Name)
	})
	if err := admin.Delete(t.Context(), user); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, ns, ds.name, "BudgetsOverlap removed", func(st lullv1.SessionStatus) bool {
		return meta.FindStatusCondition(st.Conditions, lullv1.ConditionBudgetsOverlap) == nil
	})
}
