package session

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// filesConfigMapOf is the name of the files ConfigMap a StatefulSet's pod
// template mounts (the lull-files volume), or "" for none.
func filesConfigMapOf(sts *appsv1.StatefulSet) string {
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Name == lullv1.FilesVolume && v.ConfigMap != nil {
			return v.ConfigMap.Name
		}
	}
	return ""
}

// touchFiles is called before a StatefulSet write that makes its pod
// template name the files ConfigMap of t when the StatefulSet (existing,
// as last read; empty when there is none) does not name it yet. It sets
// lull.dev/referenced-at to now on the ConfigMap, which changes its
// resourceVersion: a sweeper that judged the ConfigMap unneeded at the
// older version fails its delete precondition, and one that reads the new
// version waits its grace period before it may judge again, by which time
// the StatefulSet names it. A ConfigMap deleted before the touch is not
// created here (the template controller is its one writer and creates it
// again): the error is errFilesNotReady, and the session waits for it, so
// the write that follows never names a missing one.
func touchFiles(ctx context.Context, c client.Client, t *lullv1.SessionTemplate, desired, existing *appsv1.StatefulSet, now time.Time) error {
	name := filesConfigMapOf(desired)
	if name == "" || filesConfigMapOf(existing) == name {
		return nil
	}
	// To the nanosecond: a mark equal to the last one would be a no-op that
	// leaves the resourceVersion, and so a sweeper's precondition, as it was.
	stamp := now.UTC().Format(time.RFC3339Nano)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{lullv1.AnnotationFilesReferencedAt: stamp}}})
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: t.Namespace, Name: name}}
	err = c.Patch(ctx, cm, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(lullv1.FieldManagerController))
	if !apierrors.IsNotFound(err) {
		if err != nil {
			return fmt.Errorf("mark ConfigMap %s referenced: %w", name, err)
		}
		return nil
	}
	// Swept just now: the template controller, its one writer, creates it
	// again (it watches its ConfigMaps); until then the StatefulSet must
	// not name it.
	return errFilesNotReady{template: t.Name, name: name, why: "was deleted just before the StatefulSet would name it"}
}
