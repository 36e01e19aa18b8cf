// Package session holds the Session reconciler: it renders each session's
// runtime identity, Service and StatefulSet from its template, and moves the
// session's pod to the update revision by the drain protocol, one step per
// reconcile as package rollout decides.
package session

import (
	"context"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/rollout"
)

// Reconciler reconciles Sessions.
type Reconciler struct {
	Client client.Client
	// APIReader reads from the API server, not the cache: a pod missing
	// from the cache is looked for there, and objects lull would create
	// that exist but are not cached are read through it. Nil means Client.
	APIReader client.Reader
	Recorder  recorder.EventRecorder
	// Clock is read once per reconcile; nil means the real clock.
	Clock clock.PassiveClock

	// deleted remembers pods this controller deleted, so a reconcile that
	// runs before the cache shows the deletion does not delete again.
	deleted expectations
	// passing remembers since when a session has been in a passing state.
	passing passingStates
	// reused remembers the retained claims whose reuse was announced.
	reused reuseAnnouncements
	// restores remembers when lull last restored a session's StatefulSet
	// after another writer changed it, to space the restores of one that
	// writer keeps changing back.
	restores restoreStreaks
	// budgets remembers the sessions whose budget this controller has
	// seen exist, so a budget deleted by another writer is created again
	// with an Event.
	budgets budgetsSeen
}

// +kubebuilder:rbac:groups=lull.dev,resources=sessions,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups=lull.dev,resources=sessions/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=lull.dev,resources=sessiontemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups="",resources=services;serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch;list;watch
// +kubebuilder:rbac:groups="",resources=resourcequotas,verbs=get;list;watch

// Reconcile reconciles one session (reconcileSession) and queues the
// look-again it asks for at the default priority (lookAgain).
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	result, err := r.reconcileSession(ctx, req)
	return lookAgain(result, err), err
}

// lookAgain gives a completed reconcile's look-again (RequeueAfter: a
// settle delay, a cull or lifetime deadline, a blocked session's retry)
// the default priority, 0. controller-runtime's priority queue otherwise
// requeues an item at the priority it was handed out with: a session
// reconciled once for its Drained report (DrainedPriority) or its
// admission (AdmittedPriority) would keep going ahead of every event on
// each of its timers for the rest of its life (every running session with
// an idle policy has one), and a session first seen in the initial list or
// a resync (-100) would have its drain deadline and cull timers wait
// behind every event of a busy fleet. A step that did not complete (an
// error, a status write refused with a Conflict: conflictRetry) keeps its
// priority: its work is still to do.
func lookAgain(result ctrl.Result, err error) ctrl.Result {
	if err != nil || result.RequeueAfter <= 0 || result.Priority != nil || result == retryStep {
		return result
	}
	result.Priority = new(0)
	return result
}

// retryStep is the result of a reconcile whose status write met a newer
// version of the session: the step is computed again, at the priority it
// had.
var retryStep = ctrl.Result{RequeueAfter: conflictRetry}

func hasConditionReason(s *lullv1.Session, typ, reason string) bool {
	return conditionReason(s.Status.Conditions, typ) == reason
}

func conditionReason(conditions []metav1.Condition, typ string) string {
	if c := meta.FindStatusCondition(conditions, typ); c != nil {
		return c.Reason
	}
	return ""
}

// conflictRetry is how soon a session whose status write met a newer
// version is looked at again; the watch event of that version usually
// comes first.
const conflictRetry = 200 * time.Millisecond

// SettleDelay is how long a passing state (rollout.Passing) must last before
// it is written to status.
const SettleDelay = 5 * time.Second

// ReplacingSettleDelay is SettleDelay for a session whose status records a
// committed replacement (status.replacement): its status already says the
// pod is being replaced, and the states a replacement passes through (the
// old pod terminating, the new one pending, its runtime not yet reported)
// are written only if one lasts this long. On a loaded control plane each
// of them often outlasts 5 s, and writing each cost a fleet of 1,000
// sessions about 1.4 status writes per replaced session
// (docs/benchmarks.md). A pod stuck terminating is not a passing state
// and shows at once.
const ReplacingSettleDelay = 30 * time.Second

// settleDelay is how long the passing state of o must last to be written.
func settleDelay(o rollout.Observed) time.Duration {
	if o.Session.Status.Replacement != nil {
		return ReplacingSettleDelay
	}
	return SettleDelay
}

// settle returns how long to wait before a passing state may be written, or
// 0 when the status should be written now.
func (r *Reconciler) settle(key types.NamespacedName, o rollout.Observed, a rollout.Action) time.Duration {
	if a.Kind == rollout.DeletePod || a.Kind == rollout.HandOff {
		// The pod is on its way out: what status would say now (Pending)
		// is itself passing. A committed replacement wrote its status (and
		// its failure bookkeeping) before the delete.
		return SettleDelay
	}
	if a.Kind != rollout.Wait || !rollout.Passing(o, a) || rollout.RecordStart(o) {
		// A start seen only in the runtime's report is recorded at once,
		// passing state or not: the report can be overwritten.
		r.passing.forget(key.String())
		return 0
	}
	since := r.passing.since(key.String(), o.Session.UID, a.Reason, o.Now)
	return since.Add(settleDelay(o)).Sub(o.Now)
}

// recordDrift records a Warning Event (DriftCorrected) on s for each
// drift lull undid on one of its objects (ensure's descriptions; "" is
// none), and logs it.
func (r *Reconciler) recordDrift(ctx context.Context, s *lullv1.Session, drifts ...string) {
	for _, d := range drifts {
		if d == "" {
			continue
		}
		log.FromContext(ctx).Info("restored an object another writer changed", "drift", d)
		r.Recorder.Eventf(s, nil, corev1.EventTypeWarning, lullv1.ReasonDriftCorrected, "Render",
			"%s; restored as lull renders it (edit the SessionTemplate or the Session instead)", d)
	}
}

// related returns the pod as an Event's related object; a nil *Pod must not
// reach the recorder as a non-nil interface.
func related(pod *corev1.Pod) runtime.Object {
	if pod == nil {
		return nil
	}
	return pod
}

// reader reads from the API server, bypassing the cache.
func (r *Reconciler) reader() client.Reader {
	if r.APIReader == nil {
		return r.Client
	}
	return r.APIReader
}

func (r *Reconciler) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}

// statefulSetVersion is the resourceVersion of the session's StatefulSet
// in the cache; "" when there is none.
func (r *Reconciler) statefulSetVersion(ctx context.Context, s *lullv1.Session) (string, error) {
	sts := &appsv1.StatefulSet{}
	switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.Name}, sts); {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", err
	}
	return sts.ResourceVersion, nil
}

// pod returns the session's pod (ordinal 0 of its StatefulSet), or nil.
//
// A pod missing from the cache is looked for on the API server before the
// session is judged to have none: "no pod" lets the decision scale a
// suspended session to zero and drop a drain request and a commitment, and
// the pod informer may simply lag the Session informer (a new pod whose
// runtime has already reported, or a committed pod another controller is
// deleting). The read costs one GET per reconcile of a session without a
// pod: suspended sessions, and the moments of a replacement.
func (r *Reconciler) pod(ctx context.Context, s *lullv1.Session) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name + "-0"}
	err := r.Client.Get(ctx, key, pod)
	if apierrors.IsNotFound(err) {
		err = r.reader().Get(ctx, key, pod)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	}
	if pod.Labels[lullv1.LabelSession] != s.Name {
		return nil, nil // not the StatefulSet's pod
	}
	if pod.DeletionTimestamp == nil && r.deleted.has(string(pod.UID), r.now()) {
		// The cache has not caught up with our delete yet.
		now := metav1.NewTime(r.now())
		pod = pod.DeepCopy()
		pod.DeletionTimestamp = &now
	}
	return pod, nil
}
