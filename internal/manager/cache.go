package manager

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
)

// stripForCache is the cache transform (client-go's TransformFunc) of every
// type the controller caches except Session (session.StripSessionForCache):
// it drops managedFields and kubectl's last-applied-configuration
// annotation, which nothing in the controller reads and which are often the
// larger part of a small object (a pod's managed fields alone are a few
// KiB). The controller writes with patches and server-side apply, never an
// update of a cached object, so nothing stripped here is written back.
func stripForCache(in any) (any, error) {
	obj, err := meta.Accessor(in)
	if err != nil {
		return in, nil // a DeletedFinalStateUnknown tombstone: left as it is
	}
	// Set only when present: setting nil on an object without them
	// would allocate (kubernetes/kubernetes#124337).
	if obj.GetManagedFields() != nil {
		obj.SetManagedFields(nil)
	}
	if a := obj.GetAnnotations(); a != nil {
		delete(a, corev1.LastAppliedConfigAnnotation)
	}
	return in, nil
}
