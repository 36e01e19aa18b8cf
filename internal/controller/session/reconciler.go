// Package session holds the Session reconciler: it renders each session's
// runtime identity, Service and StatefulSet from its template, and moves the
// session's pod to the update revision by the drain protocol, one step per
// reconcile as package rollout decides.
package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

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
		return r.blockedWith(ctx, s, nil, rollout.ReasonPredecessorTerminating, waitMessage(reaped.left))
	}

	t := &lullv1.SessionTemplate{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Spec.TemplateRef.Name}, t); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		return r.blocked(ctx, s, rollout.ReasonTemplateNotFound,
			fmt.Sprintf("SessionTemplate %q not found in namespace %s; create it or fix spec.templateRef.name", s.Spec.TemplateRef.Name, s.Namespace))
	}

	if err := ensureIdentity(ctx, r.Client, r.reader(), s); err != nil {
		return r.renderFailed(ctx, s, err)
	}
	pod, err := r.pod(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	o := rollout.Observed{Now: r.now(), Session: s, Policy: rollout.EffectivePolicy(t, TemplateRevision(t)), Pod: pod, Admitted: rollout.Admitted(t.Status.Wave, s),
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
		holdConditions(&next.Conditions, s.Generation, gate.Message)
	}
	// Judged before the write: the patch refreshes s from the response.
	updated := meta.IsStatusConditionTrue(next.Conditions, lullv1.ConditionUpToDate) &&
		!meta.IsStatusConditionTrue(s.Status.Conditions, lullv1.ConditionUpToDate) && s.Status.UpdateRevision != "" &&
		s.Status.Phase != lullv1.SessionSuspended && // a resume has its own Event
		s.Status.CurrentRevision != next.CurrentRevision // a suspension taken back before its pod went updated nothing
	stuck := (a.Reason == rollout.ReasonPodStuckTerminating || a.Reason == rollout.ReasonDrainOverdue) && !hasConditionReason(s, lullv1.ConditionUpToDate, a.Reason)
	notReporting := conditionReason(next.Conditions, lullv1.ConditionActive) == rollout.ReasonRuntimeNotReporting &&
		!hasConditionReason(s, lullv1.ConditionActive, rollout.ReasonRuntimeNotReporting)
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

// execute carries out a; it returns the action as it was actually done (a
// delete the API server answers 404 or 409 becomes a Wait) and whether it
// wrote the session's status. Events are
// recorded only after the step they describe succeeded.
func (r *Reconciler) execute(ctx context.Context, o rollout.Observed, a rollout.Action) (rollout.Action, bool, error) {
	switch a.Kind {
	case rollout.RequestDrain:
		// The request is issued by the status write that follows; its
		// Event is recorded once that write succeeded (see Reconcile).
		return a, false, nil
	case rollout.Commit:
		if err := r.commit(ctx, o, a); err != nil {
			return a, false, err
		}
		if o.Session.Spec.Suspend && a.Replacement != nil && a.Replacement.Reason == lullv1.ReplacementDrained {
			// A suspension's drained pod is scaled away (Replicas is 0 from
			// the commitment on), not deleted: a delete while the
			// StatefulSet still wants one replica would only make it create
			// a pod for nothing.
			a.Kind, a.Reason = rollout.Wait, rollout.ReasonSuspending
			return a, true, nil
		}
		if a.Drain != nil && a.Drain.Reason == lullv1.DrainReasonIdle && a.Replacement != nil && a.Replacement.Reason == lullv1.ReplacementDrained {
			// An idle cull's drained pod goes with the session: the next
			// step suspends it (the StatefulSet is scaled to zero) or
			// deletes it (rollout.Decide, finishCull), or, if activity
			// reached the API server after the commitment, replaces the
			// pod. Deleting it here would only make the StatefulSet
			// create a new pod, and the session would never be culled.
			a.Kind = rollout.Wait
			return a, true, nil
		}
		a.Kind = rollout.DeletePod
		a, err := r.deletePod(ctx, o, a)
		return a, true, err
	case rollout.DeletePod:
		a, err := r.deletePod(ctx, o, a)
		return a, false, err
	case rollout.SuspendSession:
		return r.suspendIdle(ctx, o, a)
	case rollout.DeleteSession:
		return r.deleteIdle(ctx, o, a)
	}
	return a, false, nil
}

// commit writes a Commit: the replacement (with the failure bookkeeping,
// for a failed pod) in a status patch whose precondition is the
// resourceVersion of the very Session version the decision was made on.
// The API server refuses it with a Conflict if the Session changed since
// (the cache was behind, a second writer withdrew the request, the runtime
// reopened and reported Serving), so the decision and the write are one
// compare-and-swap: a commitment lands only on the state it was decided on.
// Once it has landed, no controller withdraws the request (rollout.Decide
// finishes committed replacements), and the runtime holds, until its pod is
// gone.
//
// The commit is the step's status write: the lifecycle Events it causes (a
// runtime that stopped reporting, a change of phase) are recorded with it.
func (r *Reconciler) commit(ctx context.Context, o rollout.Observed, a rollout.Action) error {
	s := o.Session
	next := rollout.NextStatus(o, a)
	notReporting := conditionReason(next.Conditions, lullv1.ConditionActive) == rollout.ReasonRuntimeNotReporting &&
		!hasConditionReason(s, lullv1.ConditionActive, rollout.ReasonRuntimeNotReporting)
	phaseBefore := s.Status.Phase
	if err := r.writeStatus(ctx, s, next, a.Reason); err != nil {
		return err
	}
	r.recordLifecycle(s, o.Pod, phaseBefore, next, a, notReporting)
	return nil
}

// deletePod deletes the pod named by a with a UID precondition. A 404 or
// 409 is a no-op.
func (r *Reconciler) deletePod(ctx context.Context, o rollout.Observed, a rollout.Action) (rollout.Action, error) {
	s := o.Session
	err := r.Client.Delete(ctx, o.Pod, client.Preconditions{UID: &a.PodUID})
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		log.FromContext(ctx).Info("pod already gone or replaced; nothing deleted", "pod", o.Pod.Name, "uid", a.PodUID)
		return rollout.Action{Kind: rollout.Wait, Reason: rollout.ReasonPodTerminating, Drain: a.Drain, Replacement: a.Replacement, Message: a.Message, RequeueAfter: time.Second}, nil
	case err != nil:
		return a, fmt.Errorf("delete pod %s: %w", o.Pod.Name, err)
	}
	actions.WithLabelValues(string(rollout.DeletePod), a.Reason).Inc()
	r.deleted.add(string(a.PodUID), r.now())
	log.FromContext(ctx).Info("deleted pod", "pod", o.Pod.Name, "uid", a.PodUID, "reason", a.Reason)
	eventType, note := corev1.EventTypeNormal, a.Message
	switch a.Reason {
	case rollout.ReasonForced:
		eventType, note = corev1.EventTypeWarning, a.Message+forcedBy(s)
	case rollout.ReasonReplaced, rollout.ReasonDrainDeadlineExceeded:
		// Turns may have been cut short: say so where operators look.
		eventType = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(s, related(o.Pod), eventType, a.Reason, "DeletePod", note)
	return a, nil
}

// forcedBy says who set the force annotation (the field manager that owns
// it) and why (the reason annotation), for the Event that records a forced
// replacement.
func forcedBy(s *lullv1.Session) string {
	who := "unknown"
	for _, mf := range s.ManagedFields {
		if mf.FieldsV1 != nil && containsField(mf.FieldsV1.Raw, lullv1.AnnotationForceUpdate) {
			who = mf.Manager
		}
	}
	why := s.Annotations[lullv1.AnnotationForceUpdateReason]
	if why == "" {
		why = "none given"
	}
	return fmt.Sprintf(" (set by %s; reason: %s)", who, why)
}

func containsField(raw []byte, annotation string) bool {
	return len(raw) > 0 && bytes.Contains(raw, []byte(`"f:`+annotation+`"`))
}

// blocked records a problem that stops the session from being rendered,
// without touching what is already running: Ready=False and UpToDate
// Unknown with the reason, and a Warning Event when the reason is new. An
// outstanding drain request is withdrawn (phase and conditions follow):
// while lull cannot act on a drained runtime, it must not hold it sealed.
// A request whose replacement is committed is kept: another controller may
// be deleting that pod, so its runtime must stay sealed.
//
// The session is looked at again with a backoff (5 s, doubling to 5
// minutes, counted from when the problem began), since what blocks it (a
// quota, a webhook, a conflicting object) can be fixed without any event
// lull watches; the condition says when the next try is.
//
// A session waiting for its template's files (ReasonFilesNotReady) is not
// broken: Ready stays what its pod says, and no Event is recorded for it,
// since the template records the cause once (its FilesReady condition).
func (r *Reconciler) blocked(ctx context.Context, s *lullv1.Session, reason, msg string) (ctrl.Result, error) {
	pod, err := r.pod(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	return r.blockedWith(ctx, s, pod, reason, msg)
}

// blockedWith is blocked with the session's pod as already read (nil: the
// session has none, as while a predecessor's objects are being reaped: the
// pod of its name is not the session's).
func (r *Reconciler) blockedWith(ctx context.Context, s *lullv1.Session, pod *corev1.Pod, reason, msg string) (ctrl.Result, error) {
	now := r.now()
	since := now
	if c := meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionUpToDate); c != nil && c.Reason == reason {
		since = c.LastTransitionTime.Time
	}
	waiting := reason == rollout.ReasonFilesNotReady
	retry := NextRetry(since, now)
	msg = fmt.Sprintf("%s; next try at %s", msg, retry.UTC().Format(time.RFC3339))
	// The report is judged on the API server's clock here too: a runtime
	// clock behind it must not make a blocked session look idle sooner.
	o := rollout.Observed{Now: now, Session: s, Pod: pod, ReportWrittenAt: ReportWrittenAt(s)}
	a := rollout.Action{Kind: rollout.Wait, Reason: reason, Message: msg}
	if c := s.Status.Replacement; c != nil && pod != nil && c.PodUID == pod.UID {
		a.Drain, a.Replacement = s.Status.Drain, c
	}
	st := rollout.NextStatus(o, a)
	st.UpdateRevision = s.Status.UpdateRevision // the StatefulSet was not read
	newReason := !hasConditionReason(s, lullv1.ConditionUpToDate, reason)
	for _, typ := range []string{lullv1.ConditionReady, lullv1.ConditionUpToDate} {
		if waiting && typ == lullv1.ConditionReady {
			continue
		}
		status := metav1.ConditionFalse
		if typ == lullv1.ConditionUpToDate {
			status = metav1.ConditionUnknown
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status,
			Reason: reason, Message: msg, ObservedGeneration: s.Generation, LastTransitionTime: metav1.NewTime(now)})
		if newReason {
			// The backoff counts from when this problem began, even when
			// the condition's status stays False.
			meta.FindStatusCondition(st.Conditions, typ).LastTransitionTime = metav1.NewTime(now)
		}
	}
	notReporting := conditionReason(st.Conditions, lullv1.ConditionActive) == rollout.ReasonRuntimeNotReporting &&
		!hasConditionReason(s, lullv1.ConditionActive, rollout.ReasonRuntimeNotReporting)
	phaseBefore := s.Status.Phase
	if err := r.writeStatus(ctx, s, st, reason); err != nil {
		return ctrl.Result{}, err
	}
	if newReason && !waiting {
		r.Recorder.Eventf(s, nil, corev1.EventTypeWarning, reason, "Render", msg)
	}
	// This write may suspend or resume the session (its phase), or say its
	// runtime stopped reporting: those Events are tied to the write that
	// changes them, whoever makes it.
	r.recordLifecycle(s, pod, phaseBefore, st, a, notReporting)
	return ctrl.Result{RequeueAfter: retry.Sub(now)}, nil
}

// NextRetry returns when a session blocked since since is tried next, seen
// at now: since + 5 s, + 10 s, + 20 s, … (each wait twice the last, at most
// 5 minutes), the first such time after now. It depends only on since and
// now, so a reconcile caused by the blocked status's own write computes the
// same time and writes nothing.
func NextRetry(since, now time.Time) time.Time {
	const first, limit = 5 * time.Second, 5 * time.Minute
	d, t := first, since.Add(first)
	for !t.After(now) {
		d = min(2*d, limit)
		t = t.Add(d)
	}
	return t
}

// renderFailed turns an error from rendering the session's objects into a
// condition and an Event: a name taken by an object the session does not
// own, or an object the API server refuses (a template that passes the
// CRD's validation but not the StatefulSet's or Service's, a quota, a
// webhook). Both are retried with backoff (see blocked). Other errors are
// returned, to be retried by the workqueue.
func (r *Reconciler) renderFailed(ctx context.Context, s *lullv1.Session, err error) (ctrl.Result, error) {
	var notOwned errNotOwned
	var invalid errInvalidTemplate
	switch {
	case errors.As(err, &invalid):
		return r.blocked(ctx, s, rollout.ReasonRenderFailed, fmt.Sprintf("SessionTemplate %s: %v", s.Spec.TemplateRef.Name, err))
	case errors.As(err, &notOwned):
		return r.blocked(ctx, s, rollout.ReasonNameConflict, err.Error())
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err):
		return r.blocked(ctx, s, rollout.ReasonRenderFailed, fmt.Sprintf("%v; fix SessionTemplate %s", err, s.Spec.TemplateRef.Name))
	}
	return ctrl.Result{}, err
}
