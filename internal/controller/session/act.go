// Carrying out the step package rollout decided: the drain request, the
// commitment, the delete, and their Events.

package session

import (
	"bytes"
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lifecycle"
	"lull.dev/lull/internal/rollout"
)

// execute carries out a, decided on o with the lifecycle judgement j; it
// returns the action as it was actually done (a delete the API server
// answers 404 or 409 becomes a Wait) and whether it wrote the session's
// status. Events are recorded only after the step they describe succeeded.
func (r *Reconciler) execute(ctx context.Context, o rollout.Observed, j lifecycle.Judgement, a rollout.Action) (rollout.Action, bool, error) {
	switch a.Kind {
	case rollout.RequestDrain:
		// The request is issued by the status write that follows; its
		// Event is recorded once that write succeeded (writeAndRecord).
		return a, false, nil
	case rollout.Commit:
		if err := r.commit(ctx, o, j, a); err != nil {
			return a, false, err
		}
		if o.Session.Spec.Suspend && a.Replacement != nil {
			// A suspension's committed pod (drained, forced or failed) is
			// scaled away (Replicas is 0 from the commitment on), not
			// deleted: a delete while the StatefulSet still wants one
			// replica would only make it create a pod for nothing, on
			// whatever image its template holds.
			a.Kind, a.Reason = rollout.Wait, lullv1.ReasonSuspending
			return a, true, nil
		}
		if rollout.CommitsCull(a) {
			// An idle cull's drained pod goes with the session: the next
			// step suspends it (the StatefulSet is scaled to zero) or
			// deletes it (rollout.Decide, finishCull), or, if activity
			// reached the API server after the commitment, replaces the
			// pod. Deleting it here would only make the StatefulSet
			// create a new pod, and the session would never be culled.
			a.Kind = rollout.Wait
			return a, true, nil
		}
		if a.HandOff {
			// The pod's node is being drained: the node's drain evicts
			// it once it is labelled (rollout.HandOff).
			a.Kind = rollout.HandOff
			a, err := r.handOff(ctx, o, a)
			return a, true, err
		}
		a.Kind = rollout.DeletePod
		a, err := r.deletePod(ctx, o, a)
		return a, true, err
	case rollout.DeletePod:
		a, err := r.deletePod(ctx, o, a)
		return a, false, err
	case rollout.HandOff:
		a, err := r.handOff(ctx, o, a)
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
// The commit is the step's status write: the Events it causes (a runtime
// that stopped reporting, a change of phase, a forced suspension) are
// recorded with it (rollout.Events).
func (r *Reconciler) commit(ctx context.Context, o rollout.Observed, j lifecycle.Judgement, a rollout.Action) error {
	// Measured before the write, which refreshes o.Session from the response.
	observe := committedDrain(o, a)
	if err := r.writeAndRecord(ctx, o, rollout.NextStatus(o, j, a), a); err != nil {
		return err
	}
	observe()
	return nil
}

// deletePod deletes the pod named by a with a UID precondition. A 404 or
// 409 is a no-op.
func (r *Reconciler) deletePod(ctx context.Context, o rollout.Observed, a rollout.Action) (rollout.Action, error) {
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
	r.recordStep(o, a)
	return a, nil
}

// forceUpdateManager returns the field manager that set the session's
// lull.dev/force-update annotation (the last managed-fields entry that owns
// it), "" when none does: rollout.Observed.ForcedBy.
func forceUpdateManager(s *lullv1.Session) string {
	who := ""
	for _, mf := range s.ManagedFields {
		if mf.FieldsV1 != nil && containsField(mf.FieldsV1.Raw, lullv1.AnnotationForceUpdate) {
			who = mf.Manager
		}
	}
	return who
}

func containsField(raw []byte, annotation string) bool {
	return len(raw) > 0 && bytes.Contains(raw, []byte(`"f:`+annotation+`"`))
}
