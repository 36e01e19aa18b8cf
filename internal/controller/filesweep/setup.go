package filesweep

import (
	"cmp"
	"context"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// SetupWithManager registers the sweeper as the controller "filesweep".
// Each watched event enqueues a pass over the object's namespace,
// PassDelay later (the events until then share it): files
// ConfigMaps (a new version starts its grace period), StatefulSets and
// SessionTemplates whose spec changed or that went away, and pods that
// went away (the cached ones: lull's; a StatefulSet whose controller
// caught up with its spec counts as changed); every pass asks for the next
// within Interval, the safety pass that catches what no event announced
// (a foreign pod or StatefulSet going away). Like every controller, it
// starts only once the manager's caches have synced, and only on the
// leader.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	onlyDeletes := predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	ns := passAfter(cmp.Or(r.PassDelay, DefaultPassDelay))
	return ctrl.NewControllerManagedBy(mgr).
		Named("filesweep").
		Watches(&corev1.ConfigMap{}, ns).
		Watches(&appsv1.StatefulSet{}, ns, builder.WithPredicates(specOrObserved)).
		Watches(&lullv1.SessionTemplate{}, ns, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Pod{}, ns, builder.WithPredicates(onlyDeletes)).
		Complete(r)
}

// specOrObserved passes a StatefulSet's creation, deletion, and the updates
// that change its spec or its controller's status.observedGeneration
// (Decide keeps every ConfigMap while a StatefulSet's controller lags its
// spec, so catching up may free some), not its other status writes.
var specOrObserved = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	old, okOld := e.ObjectOld.(*appsv1.StatefulSet)
	cur, okNew := e.ObjectNew.(*appsv1.StatefulSet)
	return !okOld || !okNew || old.Generation != cur.Generation || old.Status.ObservedGeneration != cur.Status.ObservedGeneration
}}

// passAfter enqueues the pass over an event's namespace d after the
// event. A pass already waiting is not moved later, so under a stream of
// events a namespace is passed about once every d.
func passAfter(d time.Duration) handler.EventHandler {
	add := func(o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		q.AddAfter(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace()}}, d)
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.ObjectNew, q)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.Object, q)
		},
		GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.Object, q)
		},
	}
}
