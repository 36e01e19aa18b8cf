// What the reconciler does when another controller cannot create a
// session's pod: the StatefulSet controller's FailedCreate Events, read
// from the cache, become the session's condition, and lull asks the
// StatefulSet controller to try again on the blocked schedule.

package session

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/catalog"
	"lull.dev/lull/internal/rollout"
)

// FailedCreateEvents selects the core/v1 Events the manager caches: the
// StatefulSet controller's FailedCreate Events, each quoting the API
// server's refusal of a pod or claim of a StatefulSet. They are few (one
// per refused StatefulSet, aggregated by the recorder, gone after the
// API server's event TTL), so caching them costs little even across a
// fleet; no other Event is listed or watched.
var FailedCreateEvents = fields.AndSelectors(
	fields.OneTermEqualSelector("involvedObject.kind", "StatefulSet"),
	fields.OneTermEqualSelector("reason", "FailedCreate"),
)

// IndexInvolvedUID indexes the cached Events by involvedObject.uid, so a
// session finds its StatefulSet's refusals (and no other StatefulSet's of
// its name).
const IndexInvolvedUID = "involvedObject.uid"

// IndexQuotaRefused indexes Sessions by whether a ResourceQuota may refuse
// their pod (UpToDate reason PodQuotaExceeded, or PodCreateRefused, which
// a scoped quota's refusal is; value "true"), so a change of a namespace's
// quotas finds the sessions it may release.
const IndexQuotaRefused = "status.podQuotaExceeded"

func involvedUID(o client.Object) []string {
	return []string{string(o.(*corev1.Event).InvolvedObject.UID)}
}

func quotaRefused(o client.Object) []string {
	if s := o.(*lullv1.Session); hasConditionReason(s, lullv1.ConditionUpToDate, lullv1.ReasonPodQuotaExceeded) ||
		hasConditionReason(s, lullv1.ConditionUpToDate, lullv1.ReasonPodCreateRefused) {
		return []string{"true"}
	}
	return nil
}

// createRefusal returns the refusal that keeps the session observed in o
// without its pod (rollout.PodCreateRefusal), or nil.
func (r *Reconciler) createRefusal(ctx context.Context, o rollout.Observed, t *lullv1.SessionTemplate) (*rollout.Refusal, error) {
	if o.Pod != nil || o.StatefulSet == nil || o.StatefulSet.UID == "" {
		return nil, nil
	}
	var events corev1.EventList
	if err := r.Client.List(ctx, &events, client.InNamespace(o.StatefulSet.Namespace), client.MatchingFields{IndexInvolvedUID: string(o.StatefulSet.UID)}); err != nil {
		return nil, err
	}
	if len(events.Items) > 0 {
		// Whether the refusing quota is scoped says whose refusal it is
		// (rollout.PodCreateRefusal). ResourceQuotas are few and already
		// cached (quotaToSessions watches them). One that cannot be listed
		// is taken as unscoped, as the refusal's message then says.
		var quotas corev1.ResourceQuotaList
		if err := r.Client.List(ctx, &quotas, client.InNamespace(o.StatefulSet.Namespace)); err != nil {
			log.FromContext(ctx).Info("ResourceQuotas not read: a quota's refusal is taken as unscoped", "error", err.Error())
		}
		o.Quotas = quotas.Items
	}
	return rollout.PodCreateRefusal(o, events.Items, t.Name), nil
}

// retryCreate asks the StatefulSet controller to try the refused create
// again when rollout.RetryCreate says so: it writes the time into sts's
// lull.dev/create-retried-at annotation, an update the StatefulSet
// controller syncs at once. Without it, a create refused for a full quota
// would wait for the StatefulSet controller's own backoff (up to about 17
// minutes) after the quota is raised; with it, lull's schedule (at most 5
// minutes) and, for a quota, the quota's own change.
func (r *Reconciler) retryCreate(ctx context.Context, s *lullv1.Session, sts *appsv1.StatefulSet, ref *rollout.Refusal, now time.Time) error {
	lastAsked, _ := time.Parse(time.RFC3339Nano, sts.Annotations[lullv1.AnnotationCreateRetriedAt])
	var quota *corev1.ResourceQuota
	if ref.Quota != "" {
		quota = &corev1.ResourceQuota{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: sts.Namespace, Name: ref.Quota}, quota)
		switch {
		case apierrors.IsNotFound(err):
			quota = &corev1.ResourceQuota{} // deleted: it limits nothing
		case err != nil:
			return err
		}
	}
	if !rollout.RetryCreate(ref, rollout.RefusedSince(s, ref.Reason, now), lastAsked, quota, now) {
		return nil
	}
	// The ask starts a pod from the StatefulSet's template: like every
	// write that starts a pod, it is judged on the StatefulSet and the
	// catalog as the API server holds them (the cache may not show another
	// writer's image yet), and lands only on the version judged. While the
	// catalog refuses the image the StatefulSet holds, lull does not hurry
	// the StatefulSet controller's own retries.
	live := &appsv1.StatefulSet{}
	if err := r.reader().Get(ctx, client.ObjectKeyFromObject(sts), live); err != nil {
		return client.IgnoreNotFound(err)
	}
	cat, err := catalog.Read(ctx, r.reader())
	if err != nil {
		return fmt.Errorf("confirm the catalog before asking for the pod of StatefulSet %s again: %w", sts.Name, err)
	}
	if refused := imageRefused(cat, live); refused != "" {
		log.FromContext(ctx).Info("not asking for the refused pod again: the catalog refuses its image", "statefulSet", sts.Name, "why", refused)
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": live.ResourceVersion, "annotations": map[string]string{
		lullv1.AnnotationCreateRetriedAt: now.UTC().Format(time.RFC3339Nano)}}})
	if err != nil {
		return err
	}
	err = r.Client.Patch(ctx, live, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(lullv1.FieldManagerController))
	if apierrors.IsConflict(err) {
		// Changed since it was judged: judged again on the next reconcile,
		// which the change brings.
		return nil
	}
	if err != nil {
		return fmt.Errorf("ask the StatefulSet controller to create the pod of StatefulSet %s again: %w", sts.Name, err)
	}
	log.FromContext(ctx).Info("asked the StatefulSet controller to create the refused pod again", "statefulSet", sts.Name, "reason", ref.Reason)
	return nil
}

// eventToSession maps a FailedCreate Event to the Session named like its
// StatefulSet, when one exists (the reconcile checks the StatefulSet's
// UID).
func (r *Reconciler) eventToSession(ctx context.Context, o client.Object) []reconcile.Request {
	e, ok := o.(*corev1.Event)
	if !ok {
		return nil
	}
	key := types.NamespacedName{Namespace: e.InvolvedObject.Namespace, Name: e.InvolvedObject.Name}
	if err := r.Client.Get(ctx, key, &lullv1.Session{}); err != nil {
		return nil
	}
	return []reconcile.Request{{NamespacedName: key}}
}

// quotaToSessions maps a ResourceQuota to the sessions of its namespace
// it refuses pods of (IndexQuotaRefused): its change may have made room.
func (r *Reconciler) quotaToSessions(ctx context.Context, o client.Object) []reconcile.Request {
	var list lullv1.SessionList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{IndexQuotaRefused: "true"}, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, s := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}})
	}
	return reqs
}
