package session

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Guarantee 5 of issue 21: while the RuntimeCatalog refuses the
// StatefulSet's image, no step of lull's ends in a pod created from it;
// every write that starts a pod is judged on the StatefulSet and the
// catalog as the API server holds them.
//
// The scenario: alice's pod alice-0 is gone and the StatefulSet
// controller's create of its successor is refused by a full ResourceQuota
// "pods" (hard pods=0), as its FailedCreate Event on StatefulSet alice
// (UID sts-1, at t0-1s) says. The catalog lists only example.com/agent:2,
// the image lull rendered. Another writer then sets the StatefulSet's
// runtime image to example.com/agent:3, which the catalog does not list;
// the StatefulSet informer has not delivered that edit yet, so lull's
// cache still shows its own spec on agent:2, and ensureStatefulSet finds
// nothing to restore. At the blocked schedule's first retry (t0+6s),
// retryCreate reads the catalog from the API server, as the last fix has
// it, but judges the image of the cached StatefulSet (agent:2, listed),
// and writes lull.dev/create-retried-at on the API server's StatefulSet
// (a merge patch without a resourceVersion), which holds agent:3: once
// the quota has room, that ask has the StatefulSet controller create
// alice-0 on an image the catalog refuses. confirmStatefulSet, before
// every other destructive step, reads the StatefulSet itself from the API
// server for exactly this reason.
func TestARefusedCreateIsNotRetriedOntoARefusedImageTheStatefulSetCacheHasNotShownYet(t *testing.T) {
	ctx := context.Background()
	var live atomic.Bool
	var cached atomic.Pointer[appsv1.StatefulSet]
	w := laggingWorld(t, &live, &cached, nil)
	live.Store(true)
	if err := w.c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice-0"}}); err != nil {
		t.Fatal(err)
	}
	w.deletes = nil
	zero := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pods"}, Spec: corev1.ResourceQuotaSpec{Hard: zero},
		Status: corev1.ResourceQuotaStatus{Hard: zero, Used: zero}}
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice.1"},
		InvolvedObject: corev1.ObjectReference{Kind: "StatefulSet", Namespace: "ns", Name: "alice", UID: "sts-1", APIVersion: "apps/v1"},
		Reason:         "FailedCreate", Type: corev1.EventTypeWarning, LastTimestamp: metav1.NewTime(t0.Add(-time.Second)),
		Message: `create Pod alice-0 in StatefulSet alice failed error: pods "alice-0" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=0, limited: pods=0`}
	if err := w.c.Create(ctx, quota); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Create(ctx, ev); err != nil {
		t.Fatal(err)
	}
	createCatalog(t, w, "2")
	cached.Store(w.statefulSet()) // lull's own spec on agent:2; the informer stops here
	const refused = "example.com/agent:3"
	w.handEdit(func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.Containers[0].Image = refused })
	observe(t, w)
	live.Store(false)

	w.reconcileOK()
	w.clock.SetTime(t0.Add(6 * time.Second)) // the first retry of the blocked schedule
	w.reconcileOK()

	live.Store(true)
	sts := w.statefulSet()
	live.Store(false)
	if got := sts.Annotations[lullv1.AnnotationCreateRetriedAt]; got != "" && runtimeImage(sts) == refused {
		t.Errorf("lull asked the StatefulSet controller to create alice-0 again (lull.dev/create-retried-at=%s) while the API server's StatefulSet alice holds %s, which the catalog refuses (its cache still showed agent:2)",
			got, refused)
	}
}
