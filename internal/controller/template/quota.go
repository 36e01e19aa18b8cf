package template

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// +kubebuilder:rbac:groups="",resources=resourcequotas,verbs=get;list;watch

// QuotaMayAdmitMore reports whether a ResourceQuota's change (old nil: it
// was created; new nil: it was deleted) can let a refused files ConfigMap
// in: a quota that appears or goes, its limits changed, or its recorded
// use of ConfigMaps fell. The limits admission enforces are status.hard,
// which the quota controller copies from spec.hard after an edit, so a
// change of either counts (a retry on the spec edit alone can still be
// refused). Its other status updates (the quota controller recounts on
// every create in the namespace) cannot, and must not wake the refused
// templates of a busy namespace on each of them.
func QuotaMayAdmitMore(old, new *corev1.ResourceQuota) bool {
	if old == nil || new == nil {
		return true
	}
	if !equality.Semantic.DeepEqual(old.Spec, new.Spec) || !equality.Semantic.DeepEqual(old.Status.Hard, new.Status.Hard) {
		return true
	}
	for _, name := range []corev1.ResourceName{"count/configmaps", corev1.ResourceConfigMaps} {
		before, after := old.Status.Used[name], new.Status.Used[name]
		if after.Cmp(before) < 0 {
			return true
		}
	}
	return false
}

// quotaPredicate passes the ResourceQuota events QuotaMayAdmitMore admits.
var quotaPredicate = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return true },
	DeleteFunc:  func(event.DeleteEvent) bool { return true },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, ok1 := e.ObjectOld.(*corev1.ResourceQuota)
		new, ok2 := e.ObjectNew.(*corev1.ResourceQuota)
		return ok1 && ok2 && QuotaMayAdmitMore(old, new)
	},
}

// refusedByQuota maps a ResourceQuota change to the templates of its
// namespace whose files ConfigMap was refused and waits for its next try,
// and makes that try due now: raising a quota lets the sessions move
// within a second, not after a backoff that may have reached 5 minutes.
func (r *Reconciler) refusedByQuota(_ context.Context, o client.Object) []reconcile.Request {
	keys := r.files.retryNow(o.GetNamespace())
	reqs := make([]reconcile.Request, 0, len(keys))
	for _, k := range keys {
		reqs = append(reqs, reconcile.Request{NamespacedName: k})
	}
	return reqs
}

// retryNow makes the next try of every refused files ConfigMap in
// namespace due at once, keeping the count of refusals (a quota still too
// small goes on backing off from where it was, after one more try a second
// later: see filesBackoff.failed), and returns those templates.
func (b *filesBackoff) retryNow(namespace string) []types.NamespacedName {
	b.mu.Lock()
	defer b.mu.Unlock()
	var keys []types.NamespacedName
	for k, tr := range b.tries {
		if k.Namespace != namespace || tr.failures == 0 {
			continue
		}
		tr.next = tr.next.AddDate(-1, 0, 0) // any time already past
		tr.woken = true
		b.tries[k] = tr
		keys = append(keys, k)
	}
	return keys
}
