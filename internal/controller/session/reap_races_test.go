package session

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

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

// retainedClaim is a claim alice's predecessor retained
// (WhenDeleted=Retain: no owner), created before alice.
func retainedClaim(t *testing.T, w *world) *corev1.PersistentVolumeClaim {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "workspace-alice-0", UID: "claim-1",
		Labels: map[string]string{lullv1.LabelSession: "alice"}, CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))}}
	if err := w.c.Create(context.Background(), pvc); err != nil {
		t.Fatal(err)
	}
	return pvc
}

// A session recreated under its name mounts the claim its predecessor
// retained, for the rest of its life: that is what Retain is for (a
// notebook server whose user logs in again). The reuse is announced once;
// it must not cost a read of the Session from the API server on every
// reconcile after (every runtime report, every template change), which
// at a fleet of recreated sessions is one uncached GET per event each.
func TestReusedClaimCostsNoAPIReadPerReconcile(t *testing.T) {
	var live atomic.Bool
	var liveSessionGets atomic.Int32
	w := newWorld(t, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
			if _, ok := o.(*lullv1.Session); ok && live.Load() {
				liveSessionGets.Add(1)
			}
			return c.Get(ctx, key, o, opts...)
		},
	}, func(s *lullv1.Session, _ *corev1.Pod) { s.CreationTimestamp = metav1.NewTime(t0) })
	w.r.APIReader = liveReader{c: w.c, live: &live}
	retainedClaim(t, w)
	for range 3 {
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	if n := liveSessionGets.Load(); n != 0 {
		t.Errorf("3 reconciles of a session that reuses a retained claim read the Session from the API server %d times; want 0", n)
	}
	if got := w.eventReasons(); countOf(got, lullv1.ReasonPredecessorClaimReused) != 1 {
		t.Errorf("Events %v, want exactly one %s", got, lullv1.ReasonPredecessorClaimReused)
	}
}

// The reuse announcements are remembered in memory so the Event is
// recorded once per session; a session that is gone is forgotten, or a
// controller that lives through many recreated sessions keeps one entry
// for each of them forever.
func TestReuseAnnouncementsAreForgottenWithTheSession(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, func(s *lullv1.Session, _ *corev1.Pod) { s.CreationTimestamp = metav1.NewTime(t0) })
	retainedClaim(t, w)
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if countOf(w.eventReasons(), lullv1.ReasonPredecessorClaimReused) != 1 {
		t.Fatalf("no %s Event", lullv1.ReasonPredecessorClaimReused)
	}
	if err := w.c.Delete(context.Background(), w.session()); err != nil {
		t.Fatal(err)
	}
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if n := w.r.reused.len(); n != 0 {
		t.Errorf("%d reuse announcements remembered after the session is gone; want 0", n)
	}
}

func countOf(xs []string, x string) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}
