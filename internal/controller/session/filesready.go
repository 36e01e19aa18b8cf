package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"

	"lull.dev/lull/internal/render"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// FilesConflict means a ConfigMap with the name of a template's files
// ConfigMap exists and is not the one lull would create (Why says how). lull
// never adopts it, and never mounts it.
type FilesConflict struct{ Name, Why string }

func (e FilesConflict) Error() string {
	return fmt.Sprintf("ConfigMap %s %s; lull never mounts files it did not write: delete or rename that ConfigMap and lull creates its own", e.Name, e.Why)
}

// CreateFiles makes desired, a template's files ConfigMap (FilesConfigMap),
// exist. It is content-addressed and immutable, so it is created when
// absent and never updated. It reports whether this call created it.
//
// A ConfigMap already there (in the cache, or met as AlreadyExists and then
// read through live, since the cache holds only ConfigMaps labelled
// lull.dev/files) is success only if SameFiles accepts it; otherwise the
// error is a FilesConflict. A create the API server refuses (a quota, an
// admission policy or webhook) is returned as the API server's error,
// wrapped: apierrors' predicates see through it.
func CreateFiles(ctx context.Context, c client.Client, live client.Reader, desired *corev1.ConfigMap) (bool, error) {
	existing := &corev1.ConfigMap{}
	err := c.Get(ctx, client.ObjectKeyFromObject(desired), existing)
	if apierrors.IsNotFound(err) {
		err = c.Create(ctx, desired.DeepCopy(), client.FieldOwner(FieldManager))
		if err == nil {
			return true, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return false, fmt.Errorf("create ConfigMap %s: %w", desired.Name, err)
		}
		err = live.Get(ctx, client.ObjectKeyFromObject(desired), existing)
	}
	if err != nil {
		return false, err
	}
	return false, SameFiles(existing, desired)
}

// CheckFiles returns nil when desired, a template's files ConfigMap, exists
// as lull would create it (SameFiles); a NotFound API error when it does
// not exist; a FilesConflict when another ConfigMap holds its name. A miss
// in the cache is read again through live: the template controller creates
// the ConfigMap, and the cache may not show that create yet.
func CheckFiles(ctx context.Context, c, live client.Reader, desired *corev1.ConfigMap) error {
	existing := &corev1.ConfigMap{}
	err := c.Get(ctx, client.ObjectKeyFromObject(desired), existing)
	if apierrors.IsNotFound(err) {
		err = live.Get(ctx, client.ObjectKeyFromObject(desired), existing)
	}
	if err != nil {
		return err
	}
	return SameFiles(existing, desired)
}

// SameFiles accepts an existing files ConfigMap only if it is the one lull
// would create: lull's label with the same content address, immutable, and
// byte-identical data and binaryData. It returns a FilesConflict otherwise.
func SameFiles(existing, desired *corev1.ConfigMap) error {
	var why string
	switch {
	case existing.Labels[lullv1.LabelFiles] != desired.Labels[lullv1.LabelFiles]:
		why = "is not lull's (it lacks the label " + lullv1.LabelFiles + "=" + desired.Labels[lullv1.LabelFiles] + ")"
	case existing.Immutable == nil || !*existing.Immutable:
		why = "is not immutable"
	case !maps.Equal(existing.Data, desired.Data) || !maps.EqualFunc(existing.BinaryData, desired.BinaryData, bytes.Equal):
		why = "holds other content than spec.files"
	default:
		return nil
	}
	return FilesConflict{Name: existing.Name, Why: why}
}

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
	var conflict FilesConflict
	switch err := CheckFiles(ctx, c, live, desired); {
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
	if !hasConditionReason(s, lullv1.ConditionUpToDate, lullv1.ReasonFilesNotReady) {
		now := r.now()
		if wait := r.passing.since(key.String(), lullv1.ReasonFilesNotReady, now).Add(SettleDelay).Sub(now); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
	}
	return r.blocked(ctx, s, lullv1.ReasonFilesNotReady, notReady.Error())
}
