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
	"lull.dev/lull/drain"
	"lull.dev/lull/internal/rollout"
)

// Reconciler reconciles Sessions.
type Reconciler struct {
	Client client.Client
	// APIReader reads from the API server, not the cache: a Drained report
	// is confirmed on the server before its pod is deleted. Nil means
	// Client.
	APIReader client.Reader
	Recorder  recorder.EventRecorder
	// Clock is read once per reconcile; nil means the real clock.
	Clock clock.PassiveClock

	// deleted remembers pods this controller deleted, so a reconcile that
	// runs before the cache shows the deletion does not delete again.
	deleted expectations
	// passing remembers since when a session has been in a passing state.
	passing passingStates
}

// +kubebuilder:rbac:groups=lull.dev,resources=sessions,verbs=get;list;watch
// +kubebuilder:rbac:groups=lull.dev,resources=sessions/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=lull.dev,resources=sessiontemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=services;serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconcile runs the phases for one session: template, identity, Service,
// StatefulSet, rollout step, status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	s := &lullv1.Session{}
	if err := r.Client.Get(ctx, req.NamespacedName, s); err != nil {
		if apierrors.IsNotFound(err) {
			r.passing.forget(req.String())
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if s.DeletionTimestamp != nil {
		return ctrl.Result{}, nil // owner references let the garbage collector remove the rest
	}

	t := &lullv1.SessionTemplate{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Spec.TemplateRef.Name}, t); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.blocked(ctx, s, "TemplateNotFound",
			fmt.Sprintf("SessionTemplate %q not found in namespace %s; create it or fix spec.templateRef.name", s.Spec.TemplateRef.Name, s.Namespace))
	}

	if err := ensureIdentity(ctx, r.Client, r.reader(), s); err != nil {
		return ctrl.Result{}, r.renderFailed(ctx, s, err)
	}
	if err := ensureService(ctx, r.Client, r.reader(), s, t); err != nil {
		return ctrl.Result{}, r.renderFailed(ctx, s, err)
	}
	pod, err := r.pod(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	o := rollout.Observed{Now: r.now(), Session: s, Strategy: t.Spec.UpdatePolicy.Strategy, Pod: pod}
	if o.StatefulSet, err = ensureStatefulSet(ctx, r.Client, r.reader(), s, t, rollout.Replicas(o)); err != nil {
		return ctrl.Result{}, r.renderFailed(ctx, s, err)
	}
	a := rollout.Decide(o)
	a, err = r.execute(ctx, o, a)
	if err != nil {
		return ctrl.Result{}, err
	}
	result := ctrl.Result{RequeueAfter: a.RequeueAfter}
	if wait := r.settle(req.NamespacedName, o, a); wait > 0 {
		// A passing state: look again once it has lasted SettleDelay.
		if result.RequeueAfter == 0 || wait < result.RequeueAfter {
			result.RequeueAfter = wait
		}
		return result, nil
	}
	next := rollout.NextStatus(o, a)
	// Judged before the write: the patch refreshes s from the response.
	updated := meta.IsStatusConditionTrue(next.Conditions, lullv1.ConditionUpToDate) &&
		!meta.IsStatusConditionTrue(s.Status.Conditions, lullv1.ConditionUpToDate) && s.Status.UpdateRevision != ""
	if err := r.writeStatus(ctx, s, next, a.Reason); err != nil {
		return ctrl.Result{}, err
	}
	if updated {
		r.Recorder.Eventf(s, related(o.Pod), corev1.EventTypeNormal, "Updated", "Rollout", a.Message)
	}
	return result, nil
}

// SettleDelay is how long a passing state (rollout.Passing) must last before
// it is written to status.
const SettleDelay = 5 * time.Second

// settle returns how long to wait before a passing state may be written, or
// 0 when the status should be written now.
func (r *Reconciler) settle(key types.NamespacedName, o rollout.Observed, a rollout.Action) time.Duration {
	if a.Kind == rollout.DeletePod && !a.PodFailed {
		// The pod is on its way out: what status would say now (Pending)
		// is itself passing. A failed pod's replacement is written at once,
		// for its backoff bookkeeping.
		return SettleDelay
	}
	if a.Kind != rollout.Wait || !rollout.Passing(o, a) {
		r.passing.forget(key.String())
		return 0
	}
	since := r.passing.since(key.String(), a.Reason, o.Now)
	return since.Add(SettleDelay).Sub(o.Now)
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
func (r *Reconciler) pod(ctx context.Context, s *lullv1.Session) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Name + "-0"}, pod)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	}
	if pod.Labels[lullv1.LabelSession] != s.Name {
		return nil, nil // not the StatefulSet's pod
	}
	if pod.DeletionTimestamp == nil && r.deleted.has(string(pod.UID)) {
		// The cache has not caught up with our delete yet.
		now := metav1.NewTime(r.now())
		pod = pod.DeepCopy()
		pod.DeletionTimestamp = &now
	}
	return pod, nil
}

// execute carries out a; it returns the action as it was actually done (a
// delete the API server answered 404 or 409 becomes a Wait).
func (r *Reconciler) execute(ctx context.Context, o rollout.Observed, a rollout.Action) (rollout.Action, error) {
	s := o.Session
	if a.Kind != rollout.Wait {
		defer func() { actions.WithLabelValues(string(a.Kind), a.Reason).Inc() }()
	}
	switch a.Kind {
	case rollout.RequestDrain:
		r.Recorder.Eventf(s, related(o.Pod), corev1.EventTypeNormal, a.Reason, "RequestDrain", a.Message)
	case rollout.DeletePod:
		uid := a.PodUID
		if a.Reason == rollout.ReasonDrained {
			confirmed, err := r.reportStands(ctx, s, uid)
			if err != nil {
				return a, err
			}
			if !confirmed {
				log.FromContext(ctx).Info("Drained report no longer stands on the API server; not deleting", "pod", o.Pod.Name, "request", a.Drain.RequestID)
				return rollout.Action{Kind: rollout.Wait, Reason: rollout.ReasonDraining, Drain: a.Drain, Message: a.Message}, nil
			}
		}
		err := r.Client.Delete(ctx, o.Pod, client.Preconditions{UID: &uid})
		switch {
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			log.FromContext(ctx).Info("pod already gone or replaced; nothing to delete", "pod", o.Pod.Name, "uid", uid)
			return rollout.Action{Kind: rollout.Wait, Reason: rollout.ReasonPodTerminating, Drain: a.Drain, Message: a.Message}, nil
		case err != nil:
			return a, fmt.Errorf("delete pod %s: %w", o.Pod.Name, err)
		}
		r.deleted.add(string(uid), r.now())
		eventType, note := corev1.EventTypeNormal, a.Message
		if a.Reason == rollout.ReasonForced {
			eventType, note = corev1.EventTypeWarning, a.Message+forcedBy(s)
		}
		r.Recorder.Eventf(s, related(o.Pod), eventType, a.Reason, "DeletePod", note)
	}
	return a, nil
}

// reportStands reads the session from the API server and reports whether
// its runtime's Drained report still answers the drain request for pod. The
// cache may be behind: a request withdrawn and issued again with the same
// ID (a rollback, then the same rollout) can meet the previous episode's
// Drained report there after the runtime has reopened; a runtime reopens
// only after publishing Serving, which this read sees.
func (r *Reconciler) reportStands(ctx context.Context, cached *lullv1.Session, pod types.UID) (bool, error) {
	live := &lullv1.Session{}
	if err := r.reader().Get(ctx, client.ObjectKeyFromObject(cached), live); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return drain.Answers(live.Status.Drain, live.Status.Runtime, pod), nil
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
// Unknown with the reason, and a Warning Event. An outstanding drain
// request is withdrawn (phase and conditions follow): while lull cannot act
// on a drained runtime, it must not hold it sealed.
func (r *Reconciler) blocked(ctx context.Context, s *lullv1.Session, reason, msg string) error {
	pod, err := r.pod(ctx, s)
	if err != nil {
		return err
	}
	o := rollout.Observed{Now: r.now(), Session: s, Pod: pod}
	st := rollout.NextStatus(o, rollout.Action{Kind: rollout.Wait, Reason: reason, Message: msg})
	st.UpdateRevision = s.Status.UpdateRevision // the StatefulSet was not read
	for _, typ := range []string{lullv1.ConditionReady, lullv1.ConditionUpToDate} {
		status := metav1.ConditionFalse
		if typ == lullv1.ConditionUpToDate {
			status = metav1.ConditionUnknown
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status,
			Reason: reason, Message: msg, ObservedGeneration: s.Generation, LastTransitionTime: metav1.NewTime(o.Now)})
	}
	if c := meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionReady); c == nil || c.Reason != reason {
		r.Recorder.Eventf(s, nil, corev1.EventTypeWarning, reason, "Render", msg)
	}
	return r.writeStatus(ctx, s, st, reason)
}

// renderFailed turns an error from rendering the session's objects into a
// condition and an Event when retrying cannot help: a name taken by an
// object the session does not own, or an object the API server refuses
// (a template that passes the CRD's validation but not the StatefulSet's
// or Service's). Other errors are returned, to be retried.
func (r *Reconciler) renderFailed(ctx context.Context, s *lullv1.Session, err error) error {
	var notOwned errNotOwned
	switch {
	case errors.As(err, &notOwned):
		return r.blocked(ctx, s, "NameConflict", err.Error())
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err):
		return r.blocked(ctx, s, "RenderFailed", fmt.Sprintf("%v; fix SessionTemplate %s", err, s.Spec.TemplateRef.Name))
	}
	return err
}
