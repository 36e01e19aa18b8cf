package session

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Review round 2 of issue 21, guarantee 5 (every field lull owns is
// compared on every reconcile) and the restore's rule that no step is
// taken on a spec that is not lull's.
//
// While the catalog holds a session (its template names an image the
// RuntimeCatalog does not list, so the StatefulSet keeps the image it
// has), the reconcile writes only replicas (holdStatefulSet) and compares
// nothing: a spec another writer changed meanwhile (here the runtime made
// privileged, its image left alone) is neither restored nor told, though
// the record says it is not lull's. The rollout goes on deciding on it:
// a Drained report is committed and the pod deleted, and the StatefulSet
// controller creates its successor from the other writer's spec. The
// same with an image changed to one the catalog refuses: the hold keeps
// "the image the StatefulSet holds", now that writer's, and lull rolls it
// out. (Found by a review, which committed this test failing; the hold
// now restores another writer's spec before any step.)
func TestCatalogHoldStillRestoresAnotherWritersSpecBeforeAnyStep(t *testing.T) {
	w := drainedWorld(t, apiServerStatefulSets(nil))
	createCatalog(t, w, "2")
	w.setImage("example.com/agent:3") // not listed: the session is held on agent:2
	w.handEdit(privileged)            // another writer, meanwhile
	observe(t, w)
	w.reconcileOK()
	w.reconcileOK()
	if isPrivileged(w.statefulSet()) {
		t.Errorf("during a catalog hold, another writer's edit of the StatefulSet (runtime privileged) is neither restored nor told")
		if !w.podExists() {
			t.Errorf("and the pod was deleted on it: its successor is created from the other writer's spec")
		}
	}
	if n := w.count(lullv1.ReasonDriftCorrected); n != 1 {
		t.Errorf("%s Events = %d, want 1", lullv1.ReasonDriftCorrected, n)
	}
}

// The same hole is a way around the image allow-list. During a hold the
// gate keeps "the image the StatefulSet holds" without judging it
// against the catalog (only a resume from zero is judged): another writer
// that sets the StatefulSet's runtime image to one the catalog does not
// list (here evil.example.com/miner:1) has lull drain the session's pod
// and delete it, and the StatefulSet controller starts its successor on
// that image. (Found by a review, which committed this test failing.)
func TestCatalogHoldDoesNotRollOutAnImageTheCatalogRefuses(t *testing.T) {
	w := drainedWorld(t, apiServerStatefulSets(nil))
	createCatalog(t, w, "2")
	const evil = "evil.example.com/miner:1"
	w.setImage("example.com/agent:3") // not listed: the session is held
	w.handEdit(func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.Containers[0].Image = evil })
	observe(t, w)
	w.reconcileOK()
	w.reconcileOK()
	if got := runtimeImage(w.statefulSet()); got == evil && !w.podExists() {
		t.Errorf("during a catalog hold, lull deleted the session's pod with its StatefulSet on %s, an image the catalog does not list (put there by another writer): its successor runs it", evil)
	}
}
