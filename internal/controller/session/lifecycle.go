package session

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/rollout"
)

// ReportWrittenAt returns when the API server last saw the session's
// status.runtime written: the time of the managed-fields entry that owns
// it. The API server stamps that time with its own clock whenever the
// manager's write changes a field, so a runtime's clock, skewed or forged,
// cannot keep its report fresh. Zero when no entry owns status.runtime.
func ReportWrittenAt(s *lullv1.Session) time.Time {
	var at time.Time
	for _, mf := range s.ManagedFields {
		if mf.Time == nil || mf.FieldsV1 == nil || !ownsRuntimeReport(mf.FieldsV1.Raw) {
			continue
		}
		if mf.Time.After(at) {
			at = mf.Time.Time
		}
	}
	return at
}

func ownsRuntimeReport(raw []byte) bool {
	if !bytes.Contains(raw, []byte(`"f:runtime"`)) {
		return false
	}
	var fields struct {
		Status map[string]json.RawMessage `json:"f:status"`
	}
	if err := json.Unmarshal(raw, &fields); err != nil {
		return false
	}
	_, ok := fields.Status["f:runtime"]
	return ok
}

// suspendIdle completes an idle cull by suspending the session: it sets
// spec.suspend with the resourceVersion the decision was made on as a
// precondition, so a session edited in between (resumed, its policy
// changed) is looked at again instead. The same patch names the request in
// lull.dev/idle-suspended, so a resume that comes before the pod is gone is
// not undone by suspending again. The suspension then scales the committed
// pod away (rollout.Replicas).
func (r *Reconciler) suspendIdle(ctx context.Context, o rollout.Observed, a rollout.Action) (rollout.Action, bool, error) {
	s := o.Session
	already := s.Spec.Suspend // suspended by someone else: only the request is named
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": s.ResourceVersion,
			"annotations": map[string]string{lullv1.AnnotationIdleSuspended: a.Drain.RequestID}},
		"spec": map[string]any{"suspend": true},
	})
	if err != nil {
		return a, false, err
	}
	if err := r.Client.Patch(ctx, s, client.RawPatch(types.MergePatchType, body), client.FieldOwner(lullv1.FieldManagerController)); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return rollout.Action{Kind: rollout.Wait, Reason: a.Reason, Drain: a.Drain, Replacement: a.Replacement, RequeueAfter: time.Second}, true, nil
		}
		return a, false, fmt.Errorf("suspend idle session %s: %w", s.Name, err)
	}
	if already {
		log.FromContext(ctx).Info("session suspended during its committed idle cull; cull recorded", "request", a.Drain.RequestID)
		return a, true, nil
	}
	culls.WithLabelValues(string(lullv1.IdleSuspend)).Inc()
	log.FromContext(ctx).Info("suspended idle session", "request", a.Drain.RequestID)
	r.recordStep(o, a)
	return a, true, nil
}

// deleteIdle completes an idle cull by deleting the session, with its UID
// and the resourceVersion the decision was made on as preconditions: a
// session that became active (its runtime reported), was resumed or edited
// in between is not deleted, and is looked at again.
func (r *Reconciler) deleteIdle(ctx context.Context, o rollout.Observed, a rollout.Action) (rollout.Action, bool, error) {
	s := o.Session
	uid, rv := s.UID, s.ResourceVersion
	err := r.Client.Delete(ctx, s, client.Preconditions{UID: &uid, ResourceVersion: &rv})
	switch {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		log.FromContext(ctx).Info("idle session changed before its deletion; looking again", "resourceVersion", rv)
		return rollout.Action{Kind: rollout.Wait, Reason: a.Reason, Drain: a.Drain, Replacement: a.Replacement, RequeueAfter: time.Second}, true, nil
	case err != nil:
		return a, false, fmt.Errorf("delete idle session %s: %w", s.Name, err)
	}
	culls.WithLabelValues(string(lullv1.IdleDelete)).Inc()
	log.FromContext(ctx).Info("deleted idle session", "uid", uid, "resourceVersion", rv)
	r.recordStep(o, a)
	return a, true, nil
}
