package session

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// A write that lowers a StatefulSet's replicas lands only on the version
// it was decided on; one that raises them is not held to that version
// (only to the copy it was computed against). Both writers of replicas
// hold the rule: ensureStatefulSet and holdStatefulSet.
func TestScaleDownLandsOnlyOnTheVersionDecidedOn(t *testing.T) {
	ctx := context.Background()
	for _, writer := range []string{"ensureStatefulSet", "holdStatefulSet"} {
		t.Run(writer, func(t *testing.T) {
			w := newWorld(t, interceptor.Funcs{}, nil)
			s := w.session()
			tmpl := &lullv1.SessionTemplate{}
			if err := w.c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "agent"}, tmpl); err != nil {
				t.Fatal(err)
			}
			write := func(replicas int32, decidedOn string) error {
				var err error
				if writer == "holdStatefulSet" {
					_, err = holdStatefulSet(ctx, w.c, w.c, s, replicas, decidedOn)
				} else {
					_, _, err = ensureStatefulSet(ctx, w.c, w.c, s, tmpl, replicas, decidedOn, t0, &restoreStreaks{})
				}
				return err
			}
			decidedOn := w.statefulSet().ResourceVersion
			// The StatefulSet controller counts a new pod after the decision.
			sts := w.statefulSet()
			sts.Status.Replicas = 1
			if err := w.c.Status().Update(ctx, sts); err != nil {
				t.Fatal(err)
			}
			if err := write(0, decidedOn); !apierrors.IsConflict(err) {
				t.Fatalf("scale-down decided on %s after the StatefulSet moved: err = %v, want a Conflict", decidedOn, err)
			}
			if got := ptr.Deref(w.statefulSet().Spec.Replicas, 1); got != 1 {
				t.Fatalf("replicas = %d after a refused scale-down, want 1", got)
			}
			if err := write(0, ""); !apierrors.IsConflict(err) {
				t.Fatalf("scale-down decided on no StatefulSet: err = %v, want a Conflict", err)
			}
			if err := write(0, w.statefulSet().ResourceVersion); err != nil {
				t.Fatalf("scale-down decided on the current version: %v", err)
			}
			if got := ptr.Deref(w.statefulSet().Spec.Replicas, 1); got != 0 {
				t.Fatalf("replicas = %d, want 0", got)
			}
			// A resume raises the replicas whatever the version decided on.
			if err := write(1, "stale"); err != nil {
				t.Fatalf("scale-up: %v", err)
			}
			if got := ptr.Deref(w.statefulSet().Spec.Replicas, 1); got != 1 {
				t.Fatalf("replicas = %d after the scale-up, want 1", got)
			}
		})
	}
}
