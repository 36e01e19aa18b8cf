package filesweep

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"lull.dev/lull/internal/dev/testenv"
)

// Guarantee 6 of issue 21: what a controller holds in memory of
// an object goes with the object.
//
// Every sweep pass asks for the next within Interval, also a pass over a
// namespace that has no files ConfigMap left, or no longer exists. The
// sweeper's work queue therefore holds, for the life of the process, a
// timer and a pass every Interval for every namespace that ever had an
// event of a watched object (per-branch preview namespaces, CI
// namespaces, tenants that left): a namespace gone is never forgotten. A
// pass has nothing to sweep there, and a files ConfigMap created later
// enqueues its namespace by its own event.
func TestSweeperForgetsANamespaceWithoutFilesConfigMaps(t *testing.T) {
	scheme := testenv.Scheme()
	r := &Reconciler{Client: fake.NewClientBuilder().WithScheme(scheme).Build(), Interval: time.Minute}
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "deleted-namespace"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter != 0 || res.Requeue {
		t.Errorf("a pass over a namespace with no files ConfigMap (deleted) asks for another in %s: the namespace is held in the queue forever", res.RequeueAfter)
	}
}
