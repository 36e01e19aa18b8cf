// What a reconcile does while a restore of one of the session's objects
// waits out its backoff (restoreAt): which steps wait with it, and when
// to look again.

package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/rollout"
)

// heldForRestore is a, the step rollout.Decide took on o, as far as it may
// be taken while the restore of the session's StatefulSet waits (wait):
// o.StatefulSet's spec is another writer's, so no step acts on it or on
// the pod it makes. A drain request, a commitment, a delete, a
// suspension's scale-down, a deletion of the session wait, as a Wait that
// keeps status.drain and status.replacement as they are (reason
// RevisionUnknown: the update revision of lull's spec is not published
// while the StatefulSet holds another's). A Wait, which writes only the
// session's status, is taken, except that it neither makes a drain
// request nor changes one (a deadline added): what it writes can only
// make the session safer, or say what is so. A request withdrawn (the
// Passive strategy, an idle cull whose user came back, a template rolled
// back) reopens the runtime, and a runtime start seen only in its report
// is recorded before a later write to status.runtime can erase it
// (rollout.RecordStart), neither waiting up to 5 minutes for a StatefulSet
// field it does not depend on.
func heldForRestore(o rollout.Observed, a rollout.Action, wait errRestoreDeferred) rollout.Action {
	st := o.Session.Status
	if a.Kind != rollout.Wait {
		return rollout.Action{Kind: rollout.Wait, Reason: lullv1.ReasonRevisionUnknown, Drain: st.Drain, Replacement: st.Replacement,
			Message: fmt.Sprintf("StatefulSet %s holds another writer's spec (%s); lull restores it at %s, and until then takes no step on it (%s: %s)",
				wait.name, wait.drift, wait.at.UTC().Format(time.RFC3339), a.Kind, a.Message)}
	}
	if a.Drain != nil {
		a.Drain = st.Drain
	}
	if a.Replacement != nil {
		a.Replacement = st.Replacement
	}
	return a
}

// restoreWaits collects the restores one reconcile could not write yet
// (errRestoreDeferred), to look again when the first of them may be.
type restoreWaits struct {
	first *errRestoreDeferred
}

// take returns err unless it is a restore that waits, which it records
// (and logs) instead, returning nil.
func (w *restoreWaits) take(ctx context.Context, err error) error {
	var wait errRestoreDeferred
	if !errors.As(err, &wait) {
		return err
	}
	log.FromContext(ctx).Info("object changed again by another writer; restore deferred",
		"kind", wait.kind, "name", wait.name, "drift", wait.drift, "restoreAt", wait.at, "restores", wait.restores)
	if w.first == nil || wait.at.Before(w.first.at) {
		w.first = &wait
	}
	return nil
}

// lookAgain is result with its RequeueAfter brought forward to the first
// restore that waits, if it comes sooner (now is the reconcile's clock).
// A result that retries the step at once, or an error, is left as it is.
func (w *restoreWaits) lookAgain(result ctrl.Result, err error, now time.Time) (ctrl.Result, error) {
	if w.first == nil || err != nil || result == retryStep {
		return result, err
	}
	if wait := max(w.first.at.Sub(now), time.Second/10); result.RequeueAfter <= 0 || wait < result.RequeueAfter {
		result.RequeueAfter = wait
	}
	return result, nil
}
