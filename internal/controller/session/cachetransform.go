package session

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// StripSessionForCache is the cache transform of Sessions: it drops
// kubectl's last-applied-configuration annotation and every managed-fields
// entry except the ones the controller reads: the entries that own
// status.runtime (ReportWrittenAt: the API server's time of the runtime's
// last report) and the ones that own the lull.dev/force-update annotation
// (forceUpdateManager: who forced a replacement). The controller's own
// status entry and the user's spec entry, the larger ones, go. The controller writes
// Sessions with patches only, never an update of a cached object, so
// nothing stripped is written back.
func StripSessionForCache(in any) (any, error) {
	s, ok := in.(*lullv1.Session)
	if !ok {
		return in, nil // a DeletedFinalStateUnknown tombstone: left as it is
	}
	if s.ManagedFields != nil {
		s.ManagedFields = slices.DeleteFunc(s.ManagedFields, func(mf metav1.ManagedFieldsEntry) bool {
			return mf.FieldsV1 == nil || !(ownsRuntimeReport(mf.FieldsV1.Raw) || containsField(mf.FieldsV1.Raw, lullv1.AnnotationForceUpdate))
		})
	}
	delete(s.Annotations, corev1.LastAppliedConfigAnnotation)
	return s, nil
}
