package session

import (
	"context"
	"strings"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/index"
)

// Options tune the Session controller.
type Options struct {
	// MaxConcurrentReconciles is how many sessions reconcile at once;
	// zero means 8.
	MaxConcurrentReconciles int
}

// SetupWithManager registers the reconciler and its watches: Sessions
// (spec and the runtime's reports), the objects it renders with the session
// pods and claims (by their lull.dev/session label, indexed by it as
// index.SessionLabel), their budgets, the Nodes their pods run on (by
// index.PodNodeName, only when whether the node is being drained
// changes), SessionTemplates (every session of a template whose
// spec changed is re-rendered at once), the RuntimeCatalog, and the
// templates' files ConfigMaps (by their lull.dev/template label), the
// StatefulSet controller's FailedCreate Events (FailedCreateEvents) and
// ResourceQuotas. The indexes of index.AddDefaultIndexes must be registered
// on mgr first: a template's change finds its sessions through
// index.SessionTemplateName.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, opts Options) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &lullv1.Session{}, IndexQuotaRefused, quotaRefused); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Event{}, IndexInvolvedUID, involvedUID); err != nil {
		return err
	}
	for _, list := range sessionKinds() {
		obj, err := itemOf(mgr, list)
		if err != nil {
			return err
		}
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), obj, index.SessionLabel, index.SessionLabelOf); err != nil {
			return err
		}
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, index.PodNodeName, index.PodNodeNameOf); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &policyv1.PodDisruptionBudget{}, index.BudgetOwner, index.BudgetOwnerOf); err != nil {
		return err
	}
	if opts.MaxConcurrentReconciles == 0 {
		opts.MaxConcurrentReconciles = 8
	}
	fleet.use(mgr.GetCache(), mgr.Elected())
	return ctrl.NewControllerManagedBy(mgr).
		Named("session").
		// Not For(): a Drained report goes ahead in the queue
		// (sessionEvents), and an update that moved nothing the reconciler
		// reads is not reconciled (decisionInputsChanged).
		Watches(&lullv1.Session{}, &sessionEvents{}, builder.WithPredicates(countExpiredTurns, decisionInputsChanged)).
		// By label, not by owner reference: an object whose owner
		// reference is gone (a Session deleted with --cascade=orphan,
		// references stripped by hand) must still reach the reconcile of
		// the name it is labelled with, which reaps it.
		Watches(&appsv1.StatefulSet{}, bySessionLabel, builder.WithPredicates(statefulSetInputsChanged)).
		Watches(&corev1.Service{}, bySessionLabel).
		Watches(&corev1.ServiceAccount{}, bySessionLabel).
		Watches(&rbacv1.Role{}, bySessionLabel).
		Watches(&rbacv1.RoleBinding{}, bySessionLabel).
		Watches(&corev1.Pod{}, bySessionLabel).
		Watches(&corev1.PersistentVolumeClaim{}, bySessionLabel).
		// A session's own budget by its label; any other by the session
		// pods it selects (BudgetsOverlap).
		Watches(&policyv1.PodDisruptionBudget{}, handler.EnqueueRequestsFromMapFunc(r.budgetToSessions)).
		// A node cordoned, tainted by a drain or uncordoned: the sessions
		// whose pods run on it (index.PodNodeName) are judged again.
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.nodeToSessions), builder.WithPredicates(nodeDisruptionChanged)).
		// Only a template's spec (its generation) concerns its sessions: the
		// template controller's status writes would otherwise enqueue every
		// session of the template, O(sessions) reconciles per write during
		// a rollout. Creation and deletion pass the predicate.
		Watches(&lullv1.SessionTemplate{}, handler.EnqueueRequestsFromMapFunc(r.templateToSessions),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A status write that admits sessions to the rollout's wave
		// enqueues those sessions only.
		Watches(&lullv1.SessionTemplate{}, admittedSessions).
		// A catalog edit may allow or refuse any template's image: every
		// session is judged again (catalog edits are rare).
		Watches(&lullv1.RuntimeCatalog{}, handler.EnqueueRequestsFromMapFunc(r.allSessions)).
		// A template's files ConfigMap, created by the template controller,
		// releases the sessions waiting for it (FilesNotReady). The cache
		// holds only ConfigMaps labelled lull.dev/files.
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.filesToSessions), builder.WithPredicates(filesCreated)).
		// The StatefulSet controller's refusals of a session's pod (the
		// cache holds only FailedCreate Events on StatefulSets), and the
		// quota changes that may end them.
		Watches(&corev1.Event{}, handler.EnqueueRequestsFromMapFunc(r.eventToSession)).
		Watches(&corev1.ResourceQuota{}, handler.EnqueueRequestsFromMapFunc(r.quotaToSessions)).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles, LogConstructor: sessionLog(mgr.GetLogger())}).
		Complete(r)
}

// sessionLog is the logger of each Session reconcile, as the controller
// builder makes it for a For() type: the controller, the Session's group
// and kind, and the request's key.
func sessionLog(base logr.Logger) func(*reconcile.Request) logr.Logger {
	log := base.WithValues("controller", "session", "controllerGroup", lullv1.GroupVersion.Group, "controllerKind", "Session")
	return func(req *reconcile.Request) logr.Logger {
		if req == nil {
			return log
		}
		return log.WithValues("Session", klog.KRef(req.Namespace, req.Name), "namespace", req.Namespace, "name", req.Name)
	}
}

// admittedSessions enqueues the sessions a template's status write newly
// admits to its wave (status.wave), with AdmittedPriority.
var admittedSessions = handler.Funcs{
	UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		old, okOld := e.ObjectOld.(*lullv1.SessionTemplate)
		cur, okNew := e.ObjectNew.(*lullv1.SessionTemplate)
		if !okOld || !okNew {
			return
		}
		was := map[lullv1.WaveEntry]bool{}
		for _, w := range old.Status.Wave {
			was[w] = true
		}
		for _, w := range cur.Status.Wave {
			if !was[w] {
				addWithPriority(q, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: cur.Namespace, Name: w.Session}}, AdmittedPriority)
			}
		}
	},
}

// bySessionLabel enqueues the Session an object is labelled for
// (lull.dev/session), whether or not that Session exists.
var bySessionLabel = handler.EnqueueRequestsFromMapFunc(sessionOfLabel)

// itemOf returns an empty object of the type list holds.
func itemOf(mgr ctrl.Manager, list client.ObjectList) (client.Object, error) {
	gvk, err := apiutilGVK(list, mgr.GetScheme())
	if err != nil {
		return nil, err
	}
	obj, err := mgr.GetScheme().New(gvk)
	if err != nil {
		return nil, err
	}
	return obj.(client.Object), nil
}

// apiutilGVK is the kind of the items of list.
func apiutilGVK(list client.ObjectList, sch *runtime.Scheme) (schema.GroupVersionKind, error) {
	gvk, err := apiutil.GVKForObject(list, sch)
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	return gvk, err
}

func sessionOfLabel(_ context.Context, o client.Object) []reconcile.Request {
	name, ok := o.GetLabels()[lullv1.LabelSession]
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}

// filesToSessions maps a files ConfigMap to the sessions of its template
// (its lull.dev/template label).
// filesCreated passes only the appearance of a files ConfigMap (created,
// or newly labelled lull.dev/files, which the label-selected cache reports
// as a creation): that alone releases a session waiting for it. Every
// session's StatefulSet write marks the ConfigMap referenced (an update),
// and each update enqueueing every session of the template would make a
// rollout of N sessions cost O(N²) reconciles. A deletion releases no one.
var filesCreated = predicate.Funcs{
	UpdateFunc:  func(event.UpdateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

func (r *Reconciler) filesToSessions(ctx context.Context, o client.Object) []reconcile.Request {
	tpl, ok := o.GetLabels()[lullv1.LabelTemplate]
	if !ok {
		return nil
	}
	return r.templateToSessions(ctx, &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: o.GetNamespace(), Name: tpl}})
}

func (r *Reconciler) templateToSessions(ctx context.Context, o client.Object) []reconcile.Request {
	var list lullv1.SessionList
	// Only names are read: no deep copies.
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{index.SessionTemplateName: o.GetName()}, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, s := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}})
	}
	return reqs
}

// countExpiredTurns passes every event and counts, in
// lull_runtime_expired_turns_total, each increase of a runtime's
// status.runtime.expiredTurns between two versions of a session reported by
// the same pod. A new pod's count starts from its first report.
var countExpiredTurns = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	old, okOld := e.ObjectOld.(*lullv1.Session)
	cur, okNew := e.ObjectNew.(*lullv1.Session)
	if okOld && okNew {
		if d := expiredDelta(old.Status.Runtime, cur.Status.Runtime); d > 0 {
			expiredTurns.Add(float64(d))
		}
	}
	return true
}}

// expiredDelta is how many more expired turns report b gives than a, for
// two reports of the same pod; 0 otherwise.
func expiredDelta(a, b *lullv1.RuntimeReport) int64 {
	if a == nil || b == nil || a.PodUID != b.PodUID || b.ExpiredTurns <= a.ExpiredTurns {
		return 0
	}
	return b.ExpiredTurns - a.ExpiredTurns
}

func (r *Reconciler) allSessions(ctx context.Context, _ client.Object) []reconcile.Request {
	var list lullv1.SessionList
	if err := r.Client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, s := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}})
	}
	return reqs
}
