package session

import (
	"context"
	"sync/atomic"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// A suspended session scaled to zero is not resumed onto an image the
// catalog refuses (GateImage), judged on the StatefulSet's replicas. A
// resume that comes while the cache still shows the StatefulSet at one
// replica (the suspension's scale-down not delivered yet) skips that
// check. With the template as it was, the cached copy needs no write and
// none is made; with the template changed too (an environment variable,
// not the image), lull writes the StatefulSet, computed on the API
// server's copy at zero replicas, and that write, a resume, is refused
// on the API server's catalog (confirmWrite); once the cache shows zero
// replicas the gate blocks the session.
func TestAResumeTheCacheShowsAtOneReplicaIsNotMadeOntoARefusedImage(t *testing.T) {
	for _, changed := range []bool{false, true} {
		t.Run(map[bool]string{false: "template unchanged", true: "template changed"}[changed], func(t *testing.T) {
			testResumeOnLaggingCache(t, changed)
		})
	}
}

func testResumeOnLaggingCache(t *testing.T, templateChanged bool) {
	ctx := context.Background()
	var live atomic.Bool
	var cached atomic.Pointer[appsv1.StatefulSet]
	w := laggingWorld(t, &live, &cached, func(s *lullv1.Session, _ *corev1.Pod) { s.Spec.Suspend = true })
	// The suspension's pod is gone; lull scales the StatefulSet to zero.
	if err := w.c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice-0"}}); err != nil {
		t.Fatal(err)
	}
	atOne := w.statefulSet()
	w.reconcileOK()
	if got := ptr.Deref(w.statefulSet().Spec.Replicas, 1); got != 0 {
		t.Fatalf("suspended StatefulSet at %d replicas, want 0", got)
	}
	cached.Store(atOne) // the informer has not delivered the scale-down

	createCatalog(t, w, "3")
	if templateChanged {
		tmpl := w.template()
		tmpl.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "MODE", Value: "fast"}}
		if err := w.c.Update(ctx, tmpl); err != nil {
			t.Fatal(err)
		}
	}
	s := w.session()
	s.Spec.Suspend = false
	if err := w.c.Update(ctx, s); err != nil {
		t.Fatal(err)
	}

	_, _ = w.reconcile()

	live.Store(true)
	sts := w.statefulSet()
	live.Store(false)
	if got := ptr.Deref(sts.Spec.Replicas, 1); got != 0 {
		t.Errorf("StatefulSet resumed to %d replicas on %s, an image the catalog does not list: the StatefulSet controller creates a pod on it", got, runtimeImage(sts))
	}

	// The cache catches up: the gate sees zero replicas and blocks.
	cached.Store(nil)
	_, _ = w.reconcile()
	if got := ptr.Deref(w.statefulSet().Spec.Replicas, 1); got != 0 {
		t.Errorf("StatefulSet resumed to %d replicas once the cache shows it at zero", got)
	}
	if got := conditionReason(w.session().Status.Conditions, lullv1.ConditionReady); got != lullv1.ReasonImageNotAllowed {
		t.Errorf("Ready reason = %q, want %q", got, lullv1.ReasonImageNotAllowed)
	}
}
