// What the reconciler does when it cannot render a session: the status
// that says why, and when it tries again.

package session

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/rollout"
)

// blocked records a problem that stops the session from being rendered,
// without touching what is already running (rollout.BlockedStatus), and
// looks at the session again on the blocked schedule (rollout.NextRetry),
// since what blocks it (a quota, a webhook, a conflicting object) can be
// fixed without any event lull watches.
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
	// The report is judged on the API server's clock here too: a runtime
	// clock behind it must not make a blocked session look idle sooner.
	o := rollout.Observed{Now: r.now(), Session: s, Pod: pod, ReportWrittenAt: ReportWrittenAt(s)}
	st, a := rollout.BlockedStatus(o, reason, msg)
	if err := r.writeAndRecord(ctx, o, st, a); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: a.RequeueAfter}, nil
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
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota"):
		// The namespace's capacity, not the template's fault: named apart,
		// so the rollout brake does not count it (rollout.DecideBrake).
		return r.blocked(ctx, s, lullv1.ReasonQuotaExceeded, fmt.Sprintf("%v; raise the namespace's ResourceQuota or free what it counts", err))
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err):
		return r.blocked(ctx, s, lullv1.ReasonRenderFailed, fmt.Sprintf("%v; fix SessionTemplate %s", err, s.Spec.TemplateRef.Name))
	}
	return ctrl.Result{}, err
}
