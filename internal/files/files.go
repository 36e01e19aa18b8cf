// Package files makes and checks, on the API server, the ConfigMap that
// carries a SessionTemplate's spec.files (render.FilesConfigMap renders
// it): content-addressed and immutable, so it is created when absent,
// never updated, and a ConfigMap of its name that is not exactly the one
// lull would create is never adopted (Conflict). The template controller
// creates it (Create); the session controller mounts it only once it is
// there (Check).
package files

import (
	"bytes"
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Conflict means a ConfigMap with the name of a template's files
// ConfigMap exists and is not the one lull would create (Why says how). lull
// never adopts it, and never mounts it.
type Conflict struct{ Name, Why string }

func (e Conflict) Error() string {
	return fmt.Sprintf("ConfigMap %s %s; lull never mounts files it did not write: delete or rename that ConfigMap and lull creates its own", e.Name, e.Why)
}

// Create makes desired, a template's files ConfigMap (render.FilesConfigMap),
// exist. It is content-addressed and immutable, so it is created when
// absent and never updated. It reports whether this call created it.
//
// A ConfigMap already there (in the cache, or met as AlreadyExists and then
// read through live, since the cache holds only ConfigMaps labelled
// lull.dev/files) is success only if Same accepts it; otherwise the
// error is a Conflict. A create the API server refuses (a quota, an
// admission policy or webhook) is returned as the API server's error,
// wrapped: apierrors' predicates see through it.
func Create(ctx context.Context, c client.Client, live client.Reader, desired *corev1.ConfigMap) (bool, error) {
	existing := &corev1.ConfigMap{}
	err := c.Get(ctx, client.ObjectKeyFromObject(desired), existing)
	if apierrors.IsNotFound(err) {
		err = c.Create(ctx, desired.DeepCopy(), client.FieldOwner(lullv1.FieldManagerController))
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
	return false, Same(existing, desired)
}

// Check returns nil when desired, a template's files ConfigMap, exists
// as lull would create it (Same); a NotFound API error when it does
// not exist; a Conflict when another ConfigMap holds its name. A miss
// in the cache is read again through live: the template controller creates
// the ConfigMap, and the cache may not show that create yet.
func Check(ctx context.Context, c, live client.Reader, desired *corev1.ConfigMap) error {
	existing := &corev1.ConfigMap{}
	err := c.Get(ctx, client.ObjectKeyFromObject(desired), existing)
	if apierrors.IsNotFound(err) {
		err = live.Get(ctx, client.ObjectKeyFromObject(desired), existing)
	}
	if err != nil {
		return err
	}
	return Same(existing, desired)
}

// Same accepts an existing files ConfigMap only if it is the one lull
// would create: lull's label with the same content address, immutable, and
// byte-identical data and binaryData. It returns a Conflict otherwise.
func Same(existing, desired *corev1.ConfigMap) error {
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
	return Conflict{Name: existing.Name, Why: why}
}
