// What the reconciler does when it cannot render a session: the status
// that says why, and when it tries again.

package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/rollout"
)

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
// A session waiting for its template's files (lullv1.ReasonFilesNotReady) is not
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
	waiting := reason == lullv1.ReasonFilesNotReady
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
	notReporting := conditionReason(st.Conditions, lullv1.ConditionActive) == lullv1.ReasonRuntimeNotReporting &&
		!hasConditionReason(s, lullv1.ConditionActive, lullv1.ReasonRuntimeNotReporting)
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
		return r.blocked(ctx, s, lullv1.ReasonRenderFailed, fmt.Sprintf("SessionTemplate %s: %v", s.Spec.TemplateRef.Name, err))
	case errors.As(err, &notOwned):
		return r.blocked(ctx, s, lullv1.ReasonNameConflict, err.Error())
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err):
		return r.blocked(ctx, s, lullv1.ReasonRenderFailed, fmt.Sprintf("%v; fix SessionTemplate %s", err, s.Spec.TemplateRef.Name))
	}
	return ctrl.Result{}, err
}
