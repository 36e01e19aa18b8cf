// Node drains: the budget that makes evictions of a session pod wait for
// its drain, the watch of Nodes that notices a node being drained, and the
// hand-off of a drained pod to the node's drain. The decision is package
// rollout's (decideNodeDrain, handOff); docs/protocol.md, "Node drains",
// gives the reasons.

package session

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/index"
	"lull.dev/lull/internal/render"
	"lull.dev/lull/internal/rollout"
)

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=persistentvolumes,verbs=get;list;watch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete

// reconcileBudget keeps the session's PodDisruptionBudget as its template's
// nodeDrainPolicy asks (ensureBudget), with an Event for a drift it undid
// or a budget deleted by another writer and created again. A budget that
// cannot be rendered or is refused blocks the session (renderFailed), as
// the Service does: the running pod is left alone.
func (r *Reconciler) reconcileBudget(ctx context.Context, sc *sessionScope) (phaseResult, error) {
	drift, err := ensureBudget(ctx, r.Client, r.reader(), sc.session, sc.template, sc.restoring, &r.budgets)
	r.recordDrift(ctx, sc.session, drift)
	if err := sc.waits.take(ctx, err); err != nil {
		return end(r.renderFailed(ctx, sc.session, err))
	}
	return proceed(0)
}

// ensureBudget makes the session's budget (render.PodDisruptionBudget)
// under nodeDrainPolicy strategy Drain, by the same machinery as the
// Service (ensure: created with the Session as its controller, another
// writer's edit restored once, spaced if it keeps coming back), and deletes
// it under Ignore. A budget created again for a Session whose budget this
// controller has seen before was deleted by another writer: that is
// returned as its drift. A controller that restarted has seen none, so
// such a deletion right after a restart is restored without the Event.
func ensureBudget(ctx context.Context, c client.Client, live client.Reader, s *lullv1.Session, t *lullv1.SessionTemplate, rs restoring, seen *budgetsSeen) (string, error) {
	key := client.ObjectKeyFromObject(s)
	if !rollout.GuardsEvictions(t.Spec.NodeDrainPolicy) {
		seen.forget(key)
		return "", deleteBudget(ctx, c, s)
	}
	creating, created := false, false
	drift, err := ensure(ctx, c, live, s, render.PodDisruptionBudget(s), &policyv1.PodDisruptionBudget{}, keep[*policyv1.PodDisruptionBudget]{
		kind: "PodDisruptionBudget",
		copySpec: func(dst, src *policyv1.PodDisruptionBudget) {
			dst.Spec.MaxUnavailable = src.Spec.MaxUnavailable
			dst.Spec.MinAvailable = src.Spec.MinAvailable
			dst.Spec.Selector = src.Spec.Selector
			dst.Spec.UnhealthyPodEvictionPolicy = src.Spec.UnhealthyPodEvictionPolicy
		},
		drift: budgetDrift,
		before: func(existing *policyv1.PodDisruptionBudget, _ string) error {
			creating = existing.ResourceVersion == "" // empty before a create
			return nil
		},
		written: func(*policyv1.PodDisruptionBudget) error {
			created = creating
			return nil
		},
	}, rs)
	if err != nil {
		return drift, err
	}
	if created && seen.seen(key, s.UID) {
		drift = fmt.Sprintf("PodDisruptionBudget %s: deleted by another writer; created again, so evictions of the session's pod wait for its drain again", s.Name)
	}
	seen.mark(key, s.UID)
	return drift, nil
}

// deleteBudget deletes the session's budget, if it has one it controls,
// with its UID as a precondition (a 404 or 409 is a no-op): its template's
// nodeDrainPolicy is Ignore, and evictions are left to Kubernetes.
func deleteBudget(ctx context.Context, c client.Client, s *lullv1.Session) error {
	pdb := &policyv1.PodDisruptionBudget{}
	switch err := c.Get(ctx, client.ObjectKeyFromObject(s), pdb); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	}
	if !metav1.IsControlledBy(pdb, s) {
		return nil // not lull's: never touched
	}
	uid := pdb.UID
	if err := c.Delete(ctx, pdb, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete PodDisruptionBudget %s (nodeDrainPolicy Ignore): %w", pdb.Name, err)
	}
	log.FromContext(ctx).Info("deleted the session's budget: nodeDrainPolicy is Ignore", "budget", pdb.Name)
	return nil
}

// budgetDrift describes the first field of lull's part of a budget's spec
// that existing holds otherwise than desired; "" when none.
func budgetDrift(existing, desired *policyv1.PodDisruptionBudget) string {
	e, d := existing.Spec, desired.Spec
	if es, ds := metav1.FormatLabelSelector(e.Selector), metav1.FormatLabelSelector(d.Selector); es != ds {
		return fmt.Sprintf("spec.selector is %s (renders %s)", es, ds)
	}
	if es, ds := intOrStringText(e.MaxUnavailable), intOrStringText(d.MaxUnavailable); es != ds {
		return fmt.Sprintf("spec.maxUnavailable is %s (renders %s)", es, ds)
	}
	if e.MinAvailable != nil {
		return fmt.Sprintf("spec.minAvailable is %s (renders none)", e.MinAvailable.String())
	}
	if p := e.UnhealthyPodEvictionPolicy; p != nil && *p != policyv1.IfHealthyBudget {
		return fmt.Sprintf("spec.unhealthyPodEvictionPolicy is %s (renders the default, %s)", *p, policyv1.IfHealthyBudget)
	}
	return ""
}

func intOrStringText(v *intstr.IntOrString) string {
	if v == nil {
		return "none"
	}
	return v.String()
}

// budgetsSeen remembers, for each session, the UID of the Session whose
// budget this controller has seen exist: a later create of it follows a
// deletion by another writer.
type budgetsSeen struct {
	mu sync.Mutex
	m  map[types.NamespacedName]types.UID
}

func (b *budgetsSeen) seen(key types.NamespacedName, uid types.UID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.m[key] == uid
}

func (b *budgetsSeen) mark(key types.NamespacedName, uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[types.NamespacedName]types.UID{}
	}
	b.m[key] = uid
}

func (b *budgetsSeen) forget(key types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, key)
}

// podNode returns the Node the pod runs on as the cache holds it, nil
// when the pod is not scheduled or the node is not known: rollout reads
// nil as neither disrupted nor lost. A node the cache does not hold is
// read from the API server: gone is true only when that live read returns
// NotFound too (the cache may lag behind a node just registered, and a
// node judged deleted on the cache alone would be a false NodeLost).
func (r *Reconciler) podNode(ctx context.Context, pod *corev1.Pod) (node *corev1.Node, gone bool, err error) {
	if pod == nil || pod.Spec.NodeName == "" {
		return nil, false, nil
	}
	key := types.NamespacedName{Name: pod.Spec.NodeName}
	node = &corev1.Node{}
	switch err := r.Client.Get(ctx, key, node); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, false, err
	default:
		return node, false, nil
	}
	switch err := r.reader().Get(ctx, key, node); {
	case apierrors.IsNotFound(err):
		return nil, true, nil
	case err != nil:
		return nil, false, err
	}
	return node, false, nil
}

// handOff carries out a HandOff: it labels the committed pod
// lull.dev/drained=<request ID> and stamps when (lull.dev/drained-at), in
// one merge patch whose body carries the pod's UID, so it lands only on
// that pod, never on a successor of its name. lull's budget no longer
// covers the pod, so the next eviction retry of the node's drain evicts
// exactly it; a pod nobody evicts is deleted by lull after
// rollout.NodeDrainHandoff. A 404 or 409 (the pod gone, or another pod
// of its name) is a no-op.
func (r *Reconciler) handOff(ctx context.Context, o rollout.Observed, a rollout.Action) (rollout.Action, error) {
	now := r.now()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": a.PodUID,
		"labels":      map[string]string{lullv1.LabelDrained: rollout.HandOffLabel(a.Replacement)},
		"annotations": map[string]string{lullv1.AnnotationDrainedAt: now.UTC().Format(time.RFC3339)}}})
	if err != nil {
		return a, err
	}
	pod := o.Pod.DeepCopy()
	err = r.Client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(lullv1.FieldManagerController))
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		log.FromContext(ctx).Info("pod already gone or replaced; nothing handed off", "pod", o.Pod.Name, "uid", a.PodUID)
		return rollout.Action{Kind: rollout.Wait, Reason: lullv1.ReasonPodTerminating, Drain: a.Drain, Replacement: a.Replacement, Message: a.Message, RequeueAfter: time.Second}, nil
	case err != nil:
		return a, fmt.Errorf("hand pod %s to the drain of node %s: %w", o.Pod.Name, o.Pod.Spec.NodeName, err)
	}
	actions.WithLabelValues(string(rollout.HandOff), a.Reason).Inc()
	observeDeleted(o, a, now)
	log.FromContext(ctx).Info("handed the drained pod to its node's drain", "pod", o.Pod.Name, "uid", a.PodUID, "node", o.Pod.Spec.NodeName, "reason", a.Reason)
	r.recordStep(o, a)
	a.RequeueAfter = rollout.NodeDrainHandoff + time.Second/10
	return a, nil
}

// nodeToSessions maps a Node to the sessions whose pods the cache shows on
// it (index.PodNodeName).
func (r *Reconciler) nodeToSessions(ctx context.Context, o client.Object) []reconcile.Request {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.MatchingFields{index.PodNodeName: o.GetName()}, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range pods.Items {
		reqs = append(reqs, sessionOfLabel(ctx, &pods.Items[i])...)
	}
	return reqs
}

// nodeDisruptionChanged passes a Node's update only when it changes
// whether, or why, the node is being disrupted (rollout.NodeDisruption),
// or whether, or how, it is lost (rollout.NodeLost: Ready turning False
// or Unknown, or back): its status heartbeats and label churn reconcile
// no session. Creations and
// deletions pass.
var nodeDisruptionChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	old, okOld := e.ObjectOld.(*corev1.Node)
	cur, okNew := e.ObjectNew.(*corev1.Node)
	if !okOld || !okNew {
		return true
	}
	wasWhy, was := rollout.NodeDisruption(old, nil)
	isWhy, is := rollout.NodeDisruption(cur, nil)
	return was != is || wasWhy != isWhy || nodeLossOf(old) != nodeLossOf(cur)
}}

// nodeLossOf is how a Node's updates are told apart for a session on it
// (rollout.NodeLost): its Ready condition's status, reason and transition
// time, never its heartbeats.
func nodeLossOf(n *corev1.Node) rollout.NodeLoss {
	l, _ := rollout.NodeLost(n, &corev1.Pod{Spec: corev1.PodSpec{NodeName: n.Name}}, false)
	return l
}

// overlappingBudgets returns, sorted, the names of the budgets of the
// session's namespace other than lull's (index.BudgetOwner) whose selector
// matches its pod, under nodeDrainPolicy Drain: the Eviction API refuses a
// pod covered by more than one budget, so such a pod can never be evicted
// (BudgetsOverlap). As policy/v1 reads a selector, an empty one selects
// every pod of the namespace and a missing one none.
func (r *Reconciler) overlappingBudgets(ctx context.Context, s *lullv1.Session, t *lullv1.SessionTemplate, pod *corev1.Pod) ([]string, error) {
	if pod == nil || !rollout.GuardsEvictions(t.Spec.NodeDrainPolicy) {
		return nil, nil
	}
	var list policyv1.PodDisruptionBudgetList
	if err := r.Client.List(ctx, &list, client.InNamespace(s.Namespace), client.MatchingFields{index.BudgetOwner: index.BudgetOfOther}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	var out []string
	for i := range list.Items {
		sel, err := metav1.LabelSelectorAsSelector(list.Items[i].Spec.Selector)
		if err != nil {
			continue // the API server refuses such a selector
		}
		if sel.Matches(labels.Set(pod.Labels)) {
			out = append(out, list.Items[i].Name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// budgetToSessions maps a budget to the sessions it concerns: a session's
// own by its lull.dev/session label, any other to the sessions whose pods
// (as the cache holds them) it selects.
func (r *Reconciler) budgetToSessions(ctx context.Context, o client.Object) []reconcile.Request {
	if reqs := sessionOfLabel(ctx, o); len(reqs) > 0 {
		return reqs
	}
	pdb, ok := o.(*policyv1.PodDisruptionBudget)
	if !ok {
		return nil
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		return nil
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(pdb.Namespace), client.MatchingLabelsSelector{Selector: sel}, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range pods.Items {
		reqs = append(reqs, sessionOfLabel(ctx, &pods.Items[i])...)
	}
	return reqs
}

// takeBack removes lull.dev/drained (and lull.dev/drained-at) from pod, in
// one merge patch carrying its UID, so the session's budget covers it
// again (rollout.TakesBackHandOff). A 404 or 409 (the pod gone, or
// another pod of its name) is a no-op.
func (r *Reconciler) takeBack(ctx context.Context, pod *corev1.Pod) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": pod.UID,
		"labels":      map[string]any{lullv1.LabelDrained: nil},
		"annotations": map[string]any{lullv1.AnnotationDrainedAt: nil}}})
	if err != nil {
		return err
	}
	err = r.Client.Patch(ctx, pod.DeepCopy(), client.RawPatch(types.MergePatchType, patch), client.FieldOwner(lullv1.FieldManagerController))
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("take pod %s back under its budget: %w", pod.Name, err)
	}
	log.FromContext(ctx).Info("took the pod back under its budget: nothing of lull's hands it off", "pod", pod.Name, "uid", pod.UID)
	return nil
}

// nodeStillDisrupted reads pod's Node from the API server and reports
// whether it is still disrupted (rollout.NodeDisruption); a node gone is
// not.
func (r *Reconciler) nodeStillDisrupted(ctx context.Context, pod *corev1.Pod) (bool, error) {
	node := &corev1.Node{}
	switch err := r.reader().Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, node); {
	case apierrors.IsNotFound(err):
		node = nil
	case err != nil:
		return false, err
	}
	_, disrupted := rollout.NodeDisruption(node, pod)
	return disrupted, nil
}

// pinnedClaim returns which of pod's claims holds it on node, if one does
// (rollout.PinnedTo), read only while node is disrupted under strategy
// Drain: the other sessions cost no read. It reads, from the cache, the
// claims of the pod's volumes, the PersistentVolumes bound to them (few:
// one per claim) and the Nodes the controller already watches. A claim or
// volume not found is left out (the cache holds only the claims labelled
// lull.dev/session, the session's own from its claim templates): lull
// only holds back what it knows to be stuck.
func (r *Reconciler) pinnedClaim(ctx context.Context, t *lullv1.SessionTemplate, pod *corev1.Pod, node *corev1.Node) (*rollout.Pin, error) {
	if pod == nil || node == nil || !rollout.GuardsEvictions(t.Spec.NodeDrainPolicy) {
		return nil, nil
	}
	if _, disrupted := rollout.NodeDisruption(node, pod); !disrupted {
		return nil, nil
	}
	var volumes []rollout.BoundVolume
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		pvc := &corev1.PersistentVolumeClaim{}
		switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: v.PersistentVolumeClaim.ClaimName}, pvc); {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, err
		}
		if pvc.Spec.VolumeName == "" {
			continue
		}
		pv := &corev1.PersistentVolume{}
		switch err := r.Client.Get(ctx, types.NamespacedName{Name: pvc.Spec.VolumeName}, pv); {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, err
		}
		volumes = append(volumes, rollout.BoundVolume{Claim: pvc.Name, Volume: pv})
	}
	if len(volumes) == 0 {
		return nil, nil
	}
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes); err != nil {
		return nil, err
	}
	if pin, ok := rollout.PinnedTo(node, volumes, nodes.Items); ok {
		return &pin, nil
	}
	return nil, nil
}
