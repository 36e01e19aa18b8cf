package session

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Issue 21, review round 2, guarantee 5: a second writer fighting lull
// is not fought in a loop, and drift is corrected with an Event.
//
// A writer that removes lull.dev/spec-written after each of lull's writes
// (a tool that prunes annotations it does not know, a GitOps sync that
// replaces metadata without touching the spec) changes no generation.
// Each time, lull takes the StatefulSet for one without a record and
// writes it back as it renders it: the write moves no generation, so it
// counts as undoing nothing (no Event, no restore recorded), and the
// restore backoff, kept only for restores that record an Event, never
// starts. Every event of the fight is a live GET and a PATCH, silently,
// for ever.
//
// Now every restore that lands counts in the same backoff as any other,
// and the second in a row records an Event naming the fight.
func TestRecordStrippedAfterEachWriteIsNotRestoredInASilentHotLoop(t *testing.T) {
	server := apiServerStatefulSets(nil)
	fight := false
	lullWrites := 0
	w, _ := driftWorldWith(t, nil, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			if err := server.Patch(ctx, c, o, p, opts...); err != nil {
				return err
			}
			if _, ok := o.(*appsv1.StatefulSet); ok && fight {
				lullWrites++
				other := &appsv1.StatefulSet{}
				if err := c.Get(ctx, client.ObjectKeyFromObject(o), other); err != nil {
					return err
				}
				delete(other.Annotations, lullv1.AnnotationSpecWritten)
				return c.Update(ctx, other)
			}
			return nil
		},
	})
	w.handEdit(func(s *appsv1.StatefulSet) { delete(s.Annotations, lullv1.AnnotationSpecWritten) })
	fight = true
	for range 10 {
		w.reconcileOK()
	}
	if lullWrites > 2 {
		t.Errorf("lull wrote the StatefulSet %d times in 10 reconciles within one second against a writer that strips its record after each write", lullWrites)
	}
	if n := w.count(lullv1.ReasonDriftCorrected); n == 0 && lullWrites > 1 {
		t.Errorf("the fight is silent: %d writes, no %s Event", lullWrites, lullv1.ReasonDriftCorrected)
	}
}
