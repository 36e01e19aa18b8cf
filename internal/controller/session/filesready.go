package session

import (
	"context"
	"errors"
	"fmt"

	"lull.dev/lull/internal/files"
	"lull.dev/lull/internal/render"
	"lull.dev/lull/internal/rollout"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// errFilesNotReady means the ConfigMap of the template's files does not
// exist as lull would create it (yet): the StatefulSet must not name it.
type errFilesNotReady struct{ template, name, why string }

func (e errFilesNotReady) Error() string {
	return fmt.Sprintf("waiting for ConfigMap %s of SessionTemplate %s's spec.files, which %s (see the template's %s condition); the running pod is left as it is",
		e.name, e.template, e.why, lullv1.ConditionFilesReady)
}

// filesReady returns nil when the template has no files or its files
// ConfigMap exists as lull would create it; errFilesNotReady when it does
// not (the template controller creates it, or reports why it cannot);
// errInvalidTemplate when spec.files fails the controller's own checks.
func filesReady(ctx context.Context, c, live client.Reader, t *lullv1.SessionTemplate) error {
	desired, err := render.FilesConfigMap(t)
	if err != nil {
		return errInvalidTemplate{err}
	}
	if desired == nil {
		return nil
	}
	var conflict files.Conflict
	switch err := files.Check(ctx, c, live, desired); {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return errFilesNotReady{template: t.Name, name: desired.Name, why: "does not exist yet"}
	case errors.As(err, &conflict):
		return errFilesNotReady{template: t.Name, name: desired.Name, why: "is taken by a ConfigMap that " + conflict.Why}
	default:
		return err
	}
}

// waitForFiles holds a session whose template's files ConfigMap is not
// there: its StatefulSet is not touched (its pod keeps running the pod
// template it has, and no drain is requested for the new revision). The
// wait is written to status (UpToDate Unknown, reason FilesNotReady) only
// once it has lasted SettleDelay: the template controller usually creates
// the ConfigMap within a moment of the template's change, and its watch
// event brings the session back.
func (r *Reconciler) waitForFiles(ctx context.Context, key types.NamespacedName, s *lullv1.Session, err error) (ctrl.Result, error) {
	var notReady errFilesNotReady
	if !errors.As(err, &notReady) {
		return r.renderFailed(ctx, s, err)
	}
	pod, err := r.pod(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	now := r.now()
	o := rollout.Observed{Now: now, Session: s, Pod: pod, ReportWrittenAt: ReportWrittenAt(s)}
	if !hasConditionReason(s, lullv1.ConditionUpToDate, lullv1.ReasonFilesNotReady) && !rollout.RecordStart(o) {
		// A start seen only in the runtime's report is recorded at once
		// (the blocked status carries it), as the rollout step's settle
		// does: the report can be overwritten while the wait settles.
		if wait := r.passing.since(key.String(), s.UID, lullv1.ReasonFilesNotReady, now).Add(SettleDelay).Sub(now); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
	}
	return r.blockedWith(ctx, s, pod, lullv1.ReasonFilesNotReady, notReady.Error())
}
