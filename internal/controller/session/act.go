// Carrying out the step package rollout decided: the drain request, the
// commitment, the delete, and their Events.

package session

import (
	"bytes"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/rollout"
)

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
			a.Kind, a.Reason = rollout.Wait, lullv1.ReasonSuspending
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
	notReporting := conditionReason(next.Conditions, lullv1.ConditionActive) == lullv1.ReasonRuntimeNotReporting &&
		!hasConditionReason(s, lullv1.ConditionActive, lullv1.ReasonRuntimeNotReporting)
	phaseBefore := s.Status.Phase
	// Measured before the write, which refreshes s from the response.
	observe := committedDrain(o, a)
	if err := r.writeStatus(ctx, s, next, a.Reason); err != nil {
		return err
	}
	observe()
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
		return rollout.Action{Kind: rollout.Wait, Reason: lullv1.ReasonPodTerminating, Drain: a.Drain, Replacement: a.Replacement, Message: a.Message, RequeueAfter: time.Second}, nil
	case err != nil:
		return a, fmt.Errorf("delete pod %s: %w", o.Pod.Name, err)
	}
	actions.WithLabelValues(string(rollout.DeletePod), a.Reason).Inc()
	observeDeleted(o, a, r.now())
	r.deleted.add(string(a.PodUID), r.now())
	log.FromContext(ctx).Info("deleted pod", "pod", o.Pod.Name, "uid", a.PodUID, "reason", a.Reason)
	eventType, note := corev1.EventTypeNormal, a.Message
	switch a.Reason {
	case lullv1.ReasonForced:
		eventType, note = corev1.EventTypeWarning, a.Message+forcedBy(s)
	case lullv1.ReasonReplaced, lullv1.ReasonDrainDeadlineExceeded:
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
