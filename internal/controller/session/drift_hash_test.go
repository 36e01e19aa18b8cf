package session

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/render"
)

// Guarantee 5 (review of issue 21): every field lull owns is compared on
// every reconcile and drift is corrected with an Event.
//
// A second writer that writes back an older copy of the StatefulSet (a
// GitOps tool or backup restore re-applying an export, kubectl apply of a
// saved manifest) carries the spec-hash annotation of that older render.
// keep.change takes any spec-hash that differs for lull's own new render
// and reports no drift, so the restore is written back silently: no
// DriftCorrected Event, no log of drift, although another writer changed
// the image, the replicas and lull's own annotation. (The image is
// restored; what is lost is the Event the guarantee promises.)
func TestOwnedFieldDriftIsCorrectedWithAnEventSpecHashRewritten(t *testing.T) {
	w, _ := driftWorld(t)
	w.handEdit(func(s *appsv1.StatefulSet) {
		s.Annotations[render.AnnotationSpecHash] = "an-older-render"
		s.Spec.Template.Spec.Containers[0].Image = "example.com/agent:1"
		s.Spec.Replicas = ptrTo(int32(0))
	})
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	sts := w.statefulSet()
	if sts.Spec.Template.Spec.Containers[0].Image != "example.com/agent:2" || sts.Spec.Replicas == nil || *sts.Spec.Replicas != 1 {
		t.Fatalf("StatefulSet not restored: %+v", sts.Spec)
	}
	if n := w.count(lullv1.ReasonDriftCorrected); n != 1 {
		t.Errorf("%s Events = %d, want 1: another writer's restore of an older StatefulSet (image, replicas, spec-hash) was undone in silence", lullv1.ReasonDriftCorrected, n)
	}
}
