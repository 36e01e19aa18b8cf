package session

import (
	"context"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	lullv1 "lull.dev/lull/api/v1alpha1"
)

// docs/catalog.md: "no new pod runs the image: ... a session whose
// StatefulSet does not carry the image yet keeps its StatefulSet's pod
// template as it is ..., so a pod the StatefulSet controller recreates
// (after a node loss, an eviction, a resume) runs what the session ran
// before". The Hold that keeps the template is decided by gateImage on
// the catalog cache alone; the write of a new template over a running
// StatefulSet (replicas 1 -> 1) does not raise it from zero; it changes
// the runtime image, so confirmWrite judges it on the API server's
// catalog (judgedOnLiveCatalog).
//
// Here the catalog on the API server lists only example.com/agent:2 (it
// has just been narrowed away from agent:3); the RuntimeCatalog informer
// still delivers the old copy that lists both. The template moves to
// agent:3. lull writes agent:3 into the StatefulSet's pod template. Once
// the cache catches up, GateImage finds the StatefulSet "already carries
// it" and never holds it back: from then on any pod the StatefulSet
// controller recreates (OnDelete makes recreated pods from the update
// revision) runs an image the catalog refused before lull wrote it. This
// is not the documented limit ("written while the image was allowed"):
// the image was refused on the API server when the write was made, and
// the cache may lag for as long as a watch is broken, not one round trip.
// (Found by the fifth review, which committed this test failing.)
func TestAHeldTemplateIsNotWrittenOntoAnImageTheCatalogCacheStillLists(t *testing.T) {
	ctx := context.Background()
	var live atomic.Bool
	var cached atomic.Pointer[lullv1.RuntimeCatalog]
	w := laggingWorld(t, &live, &cached, nil)
	cat := agentCatalog("2", "3")
	cached.Store(cat.DeepCopy()) // lists agent:3; the informer stops here
	cat.Spec.Images[0].Tags = []string{"2"}
	if err := w.c.Create(ctx, cat); err != nil {
		t.Fatal(err)
	}
	w.reconcileOK()
	w.setImage("example.com/agent:3")

	_, _ = w.reconcile()

	if got := runtimeImage(w.statefulSet()); got != "example.com/agent:2" {
		t.Fatalf("StatefulSet pod template moved to %s, which the API server's catalog refused when lull wrote it (the cache still listed it): a pod the StatefulSet controller recreates runs it", got)
	}
	cached.Store(nil) // the cache catches up
	w.reconcileOK()
	if got := runtimeImage(w.statefulSet()); got != "example.com/agent:2" {
		t.Errorf("after the cache caught up the StatefulSet holds %s, which the catalog refuses", got)
	}
}

// The same gap, where it starts a pod at once: the session's pod is gone
// (its committed replacement was deleted; the StatefulSet controller has
// not created the successor yet, or was waiting on a quota), so the
// StatefulSet, at one replica, creates its pod from whatever template it
// holds next. A template change to example.com/agent:3, which the API
// server's catalog refuses and the lagging cache still lists, is written
// as a plain template write (replicas 1 -> 1), must not be written: the
// successor would be created on agent:3. (Found by the fifth review,
// which committed this test failing.)
func TestATemplateWriteOverAStatefulSetWithoutItsPodIsJudgedOnTheAPIServersCatalog(t *testing.T) {
	ctx := context.Background()
	var live atomic.Bool
	var cached atomic.Pointer[lullv1.RuntimeCatalog]
	w := laggingWorld(t, &live, &cached, nil)
	cat := agentCatalog("2", "3")
	cached.Store(cat.DeepCopy())
	cat.Spec.Images[0].Tags = []string{"2"}
	if err := w.c.Create(ctx, cat); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice-0"}}); err != nil {
		t.Fatal(err)
	}
	w.setImage("example.com/agent:3")

	_, _ = w.reconcile()

	sts := w.statefulSet()
	if got := runtimeImage(sts); ptr.Deref(sts.Spec.Replicas, 1) > 0 && !w.podExists() && got != "example.com/agent:2" {
		t.Errorf("StatefulSet at %d replica(s) with no pod now holds %s, which the API server's catalog refuses: the StatefulSet controller creates the session's pod on it", ptr.Deref(sts.Spec.Replicas, 1), got)
	}
}
