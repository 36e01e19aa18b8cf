package session

import (
	"bytes"
	"context"
	"runtime/debug"
	"sync/atomic"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// gateImage and ensureStatefulSet each Get the StatefulSet from the
// cache, and the informer may deliver the suspension's scale-down between
// the two reads. The gate then judges a copy at one replica (no resume,
// so the image is not checked, and the StatefulSet already carries the
// template's image: no hold either), and ensureStatefulSet's read shows
// zero and writes replicas 1. That write raises the API server's copy
// from zero, so it is judged there, on the API server's catalog too
// (confirmWrite), and refused: the catalog does not list the image. Here
// the informer delivers the scale-down right after the gate's read.
// (Found by the fourth review, which committed this test failing.)
func TestAResumeIsNotMadeOntoARefusedImageWhenTheCacheCatchesUpAfterTheGate(t *testing.T) {
	ctx := context.Background()
	var lagging atomic.Bool
	var cached atomic.Pointer[appsv1.StatefulSet]
	funcs := apiServerStatefulSets(nil)
	funcs.Get = func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
		if sts, ok := o.(*appsv1.StatefulSet); ok && lagging.Load() && bytes.Contains(debug.Stack(), []byte(".gateImage(")) {
			// The gate's read is the informer's last before it delivers
			// the scale-down.
			lagging.Store(false)
			cached.Load().DeepCopyInto(sts)
			return nil
		}
		return c.Get(ctx, key, o, opts...)
	}
	w := newWorld(t, funcs, func(s *lullv1.Session, _ *corev1.Pod) { s.Spec.Suspend = true })
	if err := w.c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice-0"}}); err != nil {
		t.Fatal(err)
	}
	atOne := w.statefulSet()
	w.reconcileOK()
	if got := ptr.Deref(w.statefulSet().Spec.Replicas, 1); got != 0 {
		t.Fatalf("suspended StatefulSet at %d replicas, want 0", got)
	}
	cached.Store(atOne)
	lagging.Store(true)

	createCatalog(t, w, "3")
	s := w.session()
	s.Spec.Suspend = false
	if err := w.c.Update(ctx, s); err != nil {
		t.Fatal(err)
	}

	_, _ = w.reconcile()

	if lagging.Load() {
		t.Fatal("the gate never read the StatefulSet; the test does not exercise the race")
	}
	sts := w.statefulSet()
	if got := ptr.Deref(sts.Spec.Replicas, 1); got != 0 {
		t.Errorf("StatefulSet resumed to %d replicas on %s, an image the catalog does not list: the gate judged a copy at one replica, and the write a later read at zero", got, runtimeImage(sts))
	}
}
