package session

import (
	"context"
	"sync/atomic"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// statefulSetCacheLags makes the reconciler's cached reads miss every
// StatefulSet (the StatefulSet informer lags), while its live reads
// (APIReader, through live) see them.
func statefulSetCacheLags(live *atomic.Bool) interceptor.Funcs {
	return interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
			if _, ok := o.(*appsv1.StatefulSet); ok && !live.Load() {
				return apierrors.NewNotFound(schema.GroupResource{Group: "apps", Resource: "statefulsets"}, key.Name)
			}
			return c.Get(ctx, key, o, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*appsv1.StatefulSetList); ok && !live.Load() {
				return nil
			}
			return c.List(ctx, list, opts...)
		},
	}
}

// The session's first pod was created in the second its Session was
// (creation timestamps have a resolution of one second), and its owner
// reference was stripped before the status named it. The StatefulSet
// informer has not delivered the session's StatefulSet yet, so the cached
// judgement takes the pod for a predecessor's; the reaper confirms it
// against the API server, and that confirmation must see the session's own
// StatefulSet too: the pod is the live session's, and deleting it kills
// its runtime without a drain.
func TestReaperKeepsALiveSessionsPodWhoseStatefulSetTheCacheHasNotSeen(t *testing.T) {
	var live atomic.Bool
	w := newWorld(t, statefulSetCacheLags(&live), func(s *lullv1.Session, pod *corev1.Pod) {
		s.CreationTimestamp = metav1.NewTime(t0)
		pod.CreationTimestamp = metav1.NewTime(t0)
		pod.OwnerReferences = nil
	})
	w.r.APIReader = liveReader{c: w.c, live: &live}
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if !w.podExists() {
		t.Fatalf("the live session's pod %s was reaped (Events %v): its runtime was killed without a drain", w.podUID, w.eventReasons())
	}
}
