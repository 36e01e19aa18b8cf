package session

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Issue 21, review round 2, guarantee 5: a second writer fighting lull
// is not fought in a loop. The StatefulSet's restores are spaced (5 s
// doubling to 5 minutes); the Service's (and the Role's, the
// RoleBinding's) are not. Another controller that changes the session's
// Service back after each of lull's writes (here: its selector, as a
// controller that "owns" Services of the namespace would) meets a write
// of lull on every reconcile, and each of its changes triggers the next
// reconcile through the watch: a hot loop of two controllers, a live GET,
// a PATCH and a Warning Event per round, for ever.
//
// Now one mechanism spaces the restores of every object ensure keeps.
func TestServiceFoughtByAnotherWriterIsNotRestoredInAHotLoop(t *testing.T) {
	var lullWrites int
	fight := false
	w, _ := driftWorldWith(t, nil, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			svc, ok := o.(*corev1.Service)
			if !ok {
				return apiServerStatefulSets(nil).Patch(ctx, c, o, p, opts...)
			}
			if err := c.Patch(ctx, o, p, opts...); err != nil {
				return err
			}
			if fight {
				lullWrites++
				// The other controller, at once: its selector back.
				other := svc.DeepCopy()
				other.Spec.Selector = map[string]string{"app": "other"}
				if err := c.Update(ctx, other); err != nil {
					return err
				}
			}
			return nil
		},
	})
	ctx := context.Background()
	svc := &corev1.Service{}
	if err := w.c.Get(ctx, w.key, svc); err != nil {
		t.Fatal(err)
	}
	svc.Spec.Selector = map[string]string{"app": "other"}
	if err := w.c.Update(ctx, svc); err != nil {
		t.Fatal(err)
	}
	fight = true
	// Each of the other controller's writes is a watch event: ten rounds
	// within the same second.
	for range 10 {
		w.reconcileOK()
	}
	if lullWrites > 2 {
		t.Errorf("lull wrote the Service %d times in 10 reconciles within one second against a writer that changes it back (the StatefulSet's restores are spaced; the Service's are not)", lullWrites)
	}
	if n := w.count(lullv1.ReasonDriftCorrected); n > 2 {
		t.Errorf("%d %s Events in one second", n, lullv1.ReasonDriftCorrected)
	}
}
