package session

import (
	"testing"
	"time"
)

// Guarantee 5 of issue 21: while the RuntimeCatalog refuses the
// StatefulSet's image, no step of lull's ends in a pod created from it.
//
// The scenario: alice's pod is gone (evicted from a lost node, or deleted
// by someone) and the StatefulSet controller's create of its successor is
// refused by a full ResourceQuota (pods=0), as its FailedCreate Event
// says. Meanwhile the platform team narrows the catalog: it lists only
// example.com/agent:1, and alice's StatefulSet (and template) hold
// example.com/agent:2. The catalog's gate neither holds nor blocks her
// (the StatefulSet "already carries" the image and is not resumed from
// zero), and rule 9 withholds replacements onto the image, but the
// create refusal's retry (retryCreate) asks the StatefulSet controller to
// create the pod again by writing lull.dev/create-retried-at, an update it
// syncs at once: once the quota has room, that ask has the StatefulSet
// controller create alice-0 on agent:2, which the catalog refuses. The
// retry is not judged on the catalog at all (the refusal phase runs before
// the rollout step reads it), where a raise from zero replicas, the same
// "a pod where none runs", is refused on the live catalog (confirmWrite).
func TestARefusedCreateIsNotRetriedOntoAnImageTheCatalogRefuses(t *testing.T) {
	w, _, _ := refusedWorld(t)
	createCatalog(t, w, "1") // the StatefulSet holds example.com/agent:2

	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	// The first retry of the blocked schedule.
	w.clock.SetTime(t0.Add(6 * time.Second))
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if got := w.retriedAt(); got != "" {
		t.Errorf("lull asked the StatefulSet controller to create alice-0 again (lull.dev/create-retried-at=%s) from StatefulSet alice holding %s, which the catalog refuses",
			got, runtimeImage(w.statefulSet()))
	}
}
