package template

import (
	"context"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Guarantee 4 (review of issue 21): a wave place is either used or
// released, never both.
//
// A suspended session's place was released without a revoke (5f6c271), so
// nothing on the Session stopped it from using that place. alice holds the
// wave's one place (maxUnavailable 1) and has not yet issued her request;
// she is suspended and resumed within a second (an operator's mistake
// undone, a script), so her session controller's queue coalesces both
// changes and never acts on the suspension. The template controller
// reconciles in between, sees her suspended, releases her place and
// admits bob. alice's next reconcile reads the template from a cache that
// does not show that write yet (the usual few milliseconds of watch lag)
// and finds her place in the wave: nothing on her Session says it was
// released, so she issues her request. bob, whose reconcile sees the new
// wave, issues his. Two sessions drain for the update under
// maxUnavailable 1: the place was released and used.
func TestWavePlaceUsedOrReleasedSuspendedAndResumed(t *testing.T) {
	var lag atomic.Pointer[lullv1.SessionTemplate]
	w := newWaveWorld(t, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
			if tp, ok := o.(*lullv1.SessionTemplate); ok {
				if stale := lag.Load(); stale != nil {
					stale.DeepCopyInto(tp)
					return nil
				}
			}
			return c.Get(ctx, key, o, opts...)
		},
	}, interceptor.Funcs{})
	ctx := context.Background()
	setSuspend := func(v bool) {
		s := &lullv1.Session{}
		if err := w.base.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "alice"}, s); err != nil {
			t.Fatal(err)
		}
		s.Spec.Suspend = v
		if err := w.base.Update(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	before := &lullv1.SessionTemplate{}
	if err := w.base.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "agent"}, before); err != nil {
		t.Fatal(err)
	}
	setSuspend(true)
	w.reconcileTemplate() // alice is suspended: her place goes to bob
	if wave := w.wave(); len(wave) != 1 || wave[0].Session != "bob" {
		t.Fatalf("wave after alice's suspension = %+v, want bob's place only", wave)
	}
	setSuspend(false)
	lag.Store(before) // alice's reconcile: the cache does not show the template's write yet
	w.reconcileSession("alice")
	lag.Store(nil)
	w.reconcileSession("bob")
	if got := w.updateDrains(); len(got) > 1 {
		t.Fatalf("sessions draining for the update: %v; maxUnavailable is 1 (wave %+v): alice's released place was used", got, w.wave())
	}
}
