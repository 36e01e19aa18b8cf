// Package session holds the Session reconciler: it renders each session's
// runtime identity, Service and StatefulSet from its template, and moves the
// session's pod to the update revision by the drain protocol, one step per
// reconcile as package rollout decides.
package session

import (
	"context"
	"fmt"
	"time"

	"lull.dev/lull/internal/render"

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
	"lull.dev/lull/internal/lifecycle"
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
}

// +kubebuilder:rbac:groups=lull.dev,resources=sessions,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups=lull.dev,resources=sessions/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=lull.dev,resources=sessiontemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=services;serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch;list

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

// reconcileSession runs the phases for one session: orphans, template, identity,
// files, the catalog's gate on the runtime image, StatefulSet, Service,
// rollout step, status. A name whose Session no longer exists has its
// orphans reaped (see reapOrphans).
func (r *Reconciler) reconcileSession(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	s := &lullv1.Session{}
	if err := r.Client.Get(ctx, req.NamespacedName, s); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		r.passing.forget(req.String())
		r.reused.forget(req.NamespacedName)
		// What a Session deleted with --cascade=orphan left behind: the
		// watches enqueue its name for every object labelled with it.
		_, err := r.reapOrphans(ctx, req.NamespacedName, nil)
		return ctrl.Result{}, err
	}
	if s.DeletionTimestamp != nil {
		return ctrl.Result{}, nil // owner references let the garbage collector remove the rest
	}
	// Before anything is rendered: a StatefulSet created while a
	// predecessor's pod of its name is left would adopt that pod (its
	// runtime, workspace and user).
	reaped, err := r.reapOrphans(ctx, req.NamespacedName, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(reaped.left) > 0 && !reaped.ownStatefulSet {
		return r.blockedWith(ctx, s, nil, lullv1.ReasonPredecessorTerminating, waitMessage(reaped.left))
	}

	t := &lullv1.SessionTemplate{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Spec.TemplateRef.Name}, t); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		return r.blocked(ctx, s, lullv1.ReasonTemplateNotFound,
			fmt.Sprintf("SessionTemplate %q not found in namespace %s; create it or fix spec.templateRef.name", s.Spec.TemplateRef.Name, s.Namespace))
	}

	if err := ensureIdentity(ctx, r.Client, r.reader(), s); err != nil {
		return r.renderFailed(ctx, s, err)
	}
	pod, err := r.pod(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	o := rollout.Observed{Now: r.now(), Session: s, Policy: rollout.EffectivePolicy(t, render.TemplateRevision(t)), Pod: pod, Admitted: rollout.Admitted(t.Status.Wave, s),
		Lifecycle: lifecycle.PolicyFor(t, s), ReportWrittenAt: ReportWrittenAt(s)}
	if o.PendingClaims, err = pendingClaims(ctx, r.reader(), s, t, pod); err != nil {
		return ctrl.Result{}, err
	}
	// Before the StatefulSet: its pod template must never name a files
	// ConfigMap that does not exist. The template controller creates it.
	if err := filesReady(ctx, r.Client, r.reader(), t); err != nil {
		return r.waitForFiles(ctx, req.NamespacedName, s, err)
	}
	gate, err := r.gateImage(ctx, s, t, rollout.Replicas(o))
	switch {
	case err != nil:
		return ctrl.Result{}, err
	case gate.Block:
		return r.blocked(ctx, s, lullv1.ReasonImageNotAllowed, gate.Message)
	case gate.Hold:
		o.StatefulSet, err = holdStatefulSet(ctx, r.Client, s, rollout.Replicas(o))
	default:
		o.StatefulSet, err = ensureStatefulSet(ctx, r.Client, r.reader(), s, t, rollout.Replicas(o), o.Now)
	}
	if err != nil {
		return r.waitForFiles(ctx, req.NamespacedName, s, err) // touchFiles may find it swept
	}
	// After the StatefulSet: a template it refuses (at render or on the API
	// server) leaves the Service routing to the running pod as it was.
	if err := ensureService(ctx, r.Client, r.reader(), s, t); err != nil {
		return r.renderFailed(ctx, s, err)
	}
	a := rollout.Decide(o)
	a, committed, err := r.execute(ctx, o, a)
	if err != nil {
		return ctrl.Result{}, err
	}
	result := ctrl.Result{RequeueAfter: a.RequeueAfter}
	if next := rollout.Judge(o).NextCheck; !next.IsZero() {
		// The clock alone changes the judgement then: a cull or a
		// lifetime deadline comes, a pod's grace for its first report ends.
		if wait := next.Sub(o.Now) + time.Second/10; result.RequeueAfter == 0 || wait < result.RequeueAfter {
			result.RequeueAfter = wait
		}
	}
	if committed {
		return result, nil // the commit was this step's status write
	}
	if wait := r.settle(req.NamespacedName, o, a); wait > 0 {
		// A passing state: look again once it has lasted SettleDelay.
		if result.RequeueAfter == 0 || wait < result.RequeueAfter {
			result.RequeueAfter = wait
		}
		return result, nil
	}
	next := rollout.NextStatus(o, a)
	if gate.Hold {
		holdConditions(&next.Conditions, s.Generation, gate.Message, o.Now)
	}
	// Judged before the write: the patch refreshes s from the response.
	updated := meta.IsStatusConditionTrue(next.Conditions, lullv1.ConditionUpToDate) &&
		!meta.IsStatusConditionTrue(s.Status.Conditions, lullv1.ConditionUpToDate) && s.Status.UpdateRevision != "" &&
		s.Status.Phase != lullv1.SessionSuspended && // a resume has its own Event
		s.Status.CurrentRevision != next.CurrentRevision // a suspension taken back before its pod went updated nothing
	stuck := (a.Reason == lullv1.ReasonPodStuckTerminating || a.Reason == lullv1.ReasonDrainOverdue) && !hasConditionReason(s, lullv1.ConditionUpToDate, a.Reason)
	notReporting := conditionReason(next.Conditions, lullv1.ConditionActive) == lullv1.ReasonRuntimeNotReporting &&
		!hasConditionReason(s, lullv1.ConditionActive, lullv1.ReasonRuntimeNotReporting)
	phaseBefore := s.Status.Phase
	if err := r.writeStatus(ctx, s, next, a.Reason); apierrors.IsConflict(err) {
		// The status was computed from a version the API server has
		// moved past (the runtime reported, the spec changed, the cache is
		// behind): the compare-and-swap refused it, as it should. Compute
		// it again from the newer version; this is not an error.
		log.FromContext(ctx).V(1).Info("session changed since it was read; reconciling again", "resourceVersion", s.ResourceVersion)
		return retryStep, nil
	} else if err != nil {
		return ctrl.Result{}, err
	}
	r.recordLifecycle(s, o.Pod, phaseBefore, next, a, notReporting)
	switch {
	case a.Kind == rollout.RequestDrain:
		actions.WithLabelValues(string(a.Kind), a.Reason).Inc()
		log.FromContext(ctx).Info("requested drain", "pod", o.Pod.Name, "request", a.Drain.RequestID, "reason", a.Drain.Reason)
		r.Recorder.Eventf(s, related(o.Pod), corev1.EventTypeNormal, a.Reason, "RequestDrain", a.Message)
	case updated:
		r.Recorder.Eventf(s, related(o.Pod), corev1.EventTypeNormal, "Updated", "Rollout", a.Message)
	case stuck:
		r.Recorder.Eventf(s, related(o.Pod), corev1.EventTypeWarning, a.Reason, "Rollout", a.Message)
	}
	return result, nil
}

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
	if a.Kind == rollout.DeletePod {
		// The pod is on its way out: what status would say now (Pending)
		// is itself passing. A committed replacement wrote its status (and
		// its failure bookkeeping) before the delete.
		return SettleDelay
	}
	if a.Kind != rollout.Wait || !rollout.Passing(o, a) {
		r.passing.forget(key.String())
		return 0
	}
	since := r.passing.since(key.String(), a.Reason, o.Now)
	return since.Add(settleDelay(o)).Sub(o.Now)
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
