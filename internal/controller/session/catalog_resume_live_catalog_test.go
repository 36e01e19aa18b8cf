package session

import (
	"context"
	"sync/atomic"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// A resume makes the StatefulSet controller create a pod, from the
// template the StatefulSet holds, as surely as a replacement's delete
// does. docs/catalog.md: "A suspended session does not resume onto an
// image the catalog does not list", and docs/protocol.md judges every
// step that makes a pod on the catalog as the API server holds it. The
// resume's gate (gateImage) reads the catalog from the cache only; the
// write that resumes is judged again on the API server's catalog
// (confirmWrite).
//
// Here the session is suspended at zero replicas (the cache shows that),
// and the catalog has just been narrowed to refuse example.com/agent:2,
// the image its StatefulSet holds; the RuntimeCatalog informer has not
// delivered the narrowing yet. The user resumes the session. lull
// must not write replicas 1: the StatefulSet controller would create a
// pod on the refused image. (Found by the fourth review, which committed this test
// failing.)
func TestAResumeIsNotMadeOntoAnImageTheCatalogCacheStillLists(t *testing.T) {
	ctx := context.Background()
	var live atomic.Bool
	var cached atomic.Pointer[lullv1.RuntimeCatalog] // the informer's copy, once it lags
	w := laggingWorld(t, &live, &cached, func(s *lullv1.Session, _ *corev1.Pod) { s.Spec.Suspend = true })
	cat := createCatalog(t, w, "2")
	// The suspension's pod is gone; lull scales the StatefulSet to zero.
	if err := w.c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice-0"}}); err != nil {
		t.Fatal(err)
	}
	w.reconcileOK()
	if got := ptr.Deref(w.statefulSet().Spec.Replicas, 1); got != 0 {
		t.Fatalf("suspended StatefulSet at %d replicas, want 0", got)
	}

	cached.Store(cat.DeepCopy()) // lists agent:2; the informer stops here
	cat.Spec.Images[0].Tags = []string{"3"}
	if err := w.c.Update(ctx, cat); err != nil {
		t.Fatal(err)
	}
	s := w.session()
	s.Spec.Suspend = false
	if err := w.c.Update(ctx, s); err != nil {
		t.Fatal(err)
	}

	_, _ = w.reconcile()

	sts := w.statefulSet()
	if got := ptr.Deref(sts.Spec.Replicas, 1); got != 0 {
		t.Errorf("StatefulSet resumed to %d replicas on %s, which the API server's catalog no longer lists (the cache still listed it): the StatefulSet controller creates a pod on it", got, runtimeImage(sts))
	}
}

// A new session's StatefulSet is created at one replica: the StatefulSet
// controller creates its pod at once. The gate (GateImage, no StatefulSet
// yet) reads the catalog from the cache; one that has not delivered a
// narrowing still lists the template's image. The create is judged on the
// catalog as the API server holds it (confirmWrite): no StatefulSet, and
// once the cache catches up the session says ImageNotAllowed.
func TestANewSessionsStatefulSetIsNotCreatedOntoAnImageTheCatalogCacheStillLists(t *testing.T) {
	ctx := context.Background()
	var live atomic.Bool
	var cached atomic.Pointer[lullv1.RuntimeCatalog]
	w := laggingWorld(t, &live, &cached, nil)
	// A new session: no StatefulSet, no pod yet.
	for _, o := range []client.Object{
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice-0"}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice"}},
	} {
		if err := w.c.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cat := agentCatalog("2")
	cached.Store(cat.DeepCopy()) // lists agent:2; the informer stops here
	cat.Spec.Images[0].Tags = []string{"3"}
	if err := w.c.Create(ctx, cat); err != nil {
		t.Fatal(err)
	}

	res, err := w.reconcile()
	if err != nil {
		t.Fatal(err)
	}
	if res != retryStep {
		t.Errorf("result = %+v, want the step decided again (%+v)", res, retryStep)
	}
	if err := w.c.Get(ctx, w.key, &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Fatalf("StatefulSet created at one replica on example.com/agent:2, which the API server's catalog no longer lists (the cache still listed it): err %v, want NotFound", err)
	}

	cached.Store(nil) // the cache catches up: the gate blocks
	w.reconcileOK()
	if err := w.c.Get(ctx, w.key, &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Errorf("StatefulSet created once the cache shows the narrowed catalog: err %v, want NotFound", err)
	}
	if got := conditionReason(w.session().Status.Conditions, lullv1.ConditionReady); got != lullv1.ReasonImageNotAllowed {
		t.Errorf("Ready reason = %q, want %q", got, lullv1.ReasonImageNotAllowed)
	}
}
