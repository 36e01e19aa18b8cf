package session

import (
	"context"
	"testing"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Guarantee 5 (issue 21: owned fields compared; drift corrected with an
// Event), against the lull.dev/spec-written record (review round 2).
//
// The record named a generation and a spec-hash, not the object: a
// StatefulSet deleted and created again under its name (kubectl replace
// --force of an edited copy, kubectl delete --cascade=orphan then create,
// a backup tool's restore) starts again at generation 1, and a copy of a
// StatefulSet lull created and never rewrote (every session whose
// template has not changed) carries the record "1/<hash>". The copy,
// edited (here: the runtime made privileged), is at generation 1 with
// that record: lull took it for its own write and never compared a field
// of it. No restore, no Event; and the pod it made (or the stale pod lull
// drained for the new update revision) ran the edited spec. The record
// now names the UID too.
func TestStatefulSetRecreatedUnderItsNameIsNotTakenForLullsOwnWrite(t *testing.T) {
	w, _ := driftWorld(t)
	ctx := context.Background()
	old := w.statefulSet()
	if old.Generation != 1 {
		t.Fatalf("generation = %d, want lull's create's 1", old.Generation)
	}
	copied := old.DeepCopy()
	if err := w.c.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	copied.ResourceVersion = ""
	copied.UID = "sts-2"
	privileged(copied)
	if err := w.c.Create(ctx, copied); err != nil { // the API server: generation 1
		t.Fatal(err)
	}
	if g := w.statefulSet().Generation; g != 1 {
		t.Fatalf("recreated generation = %d, want 1", g)
	}
	w.reconcileOK()
	w.reconcileOK()
	if isPrivileged(w.statefulSet()) {
		t.Errorf("a StatefulSet recreated under its name from an edited copy (runtime privileged) is taken for lull's own write: the edit stays")
	}
	if n := w.count(lullv1.ReasonDriftCorrected); n != 1 {
		t.Errorf("%s Events = %d, want 1", lullv1.ReasonDriftCorrected, n)
	}
}
