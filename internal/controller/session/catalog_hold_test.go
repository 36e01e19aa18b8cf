package session

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/render"
)

// heldTemplate finds lull's own last write of a held StatefulSet by its
// recorded spec-hash: the image that renders it, at either replica
// count; none when the template changed more than its image, or the
// StatefulSet has no record.
func TestHeldTemplateFindsTheImageOfLullsLastWrite(t *testing.T) {
	s := &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice", UID: "session-uid"}}
	tmpl := func(image, env string) *lullv1.SessionTemplate {
		c := corev1.Container{Name: lullv1.RuntimeContainerName, Image: image}
		if env != "" {
			c.Env = []corev1.EnvVar{{Name: "MODE", Value: env}}
		}
		return &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "agent"},
			Spec: lullv1.SessionTemplateSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}}}
	}
	written, err := render.StatefulSet(s, tmpl("example.com/agent:2", ""), 0) // suspended when lull last wrote it
	if err != nil {
		t.Fatal(err)
	}
	written.Annotations[lullv1.AnnotationSpecWritten] = formatSpecWritten(4, written.Annotations[render.AnnotationSpecHash], written.UID)
	images := []string{"evil.example.com/miner:1", "", "example.com/agent:2"}
	held := heldTemplate(s, tmpl("example.com/agent:3", ""), written, images)
	if held == nil || held.RuntimeContainer().Image != "example.com/agent:2" {
		t.Fatalf("heldTemplate = %+v, want the template with example.com/agent:2", held)
	}
	if got := heldTemplate(s, tmpl("example.com/agent:3", "new"), written, images); got != nil {
		t.Errorf("template changed beyond its image: heldTemplate = %+v, want nil (lull's last write is not at hand)", got.RuntimeContainer())
	}
	delete(written.Annotations, lullv1.AnnotationSpecWritten)
	if got := heldTemplate(s, tmpl("example.com/agent:3", ""), written, images); got != nil {
		t.Errorf("no record: heldTemplate = %+v, want nil", got.RuntimeContainer())
	}
}

// During a catalog hold, a StatefulSet another writer changed that lull
// cannot restore (the template changed more than its image, so no image
// renders lull's last write) gets no step: its Drained pod is not
// deleted, and the session says why (ImageNotAllowed).
func TestCatalogHoldTakesNoStepOnAnotherWritersSpecItCannotRestore(t *testing.T) {
	ctx := context.Background()
	w := drainedWorld(t, apiServerStatefulSets(nil))
	createCatalog(t, w, "2")
	tmpl := w.template()
	tmpl.Spec.Template.Spec.Containers[0].Image = "example.com/agent:3" // not listed: held
	tmpl.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "MODE", Value: "new"}}
	if err := w.c.Update(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	w.handEdit(privileged)
	observe(t, w)
	w.reconcileOK()
	w.reconcileOK()
	if !w.podExists() {
		t.Errorf("the pod was deleted on another writer's spec that lull could not restore")
	}
	if !isPrivileged(w.statefulSet()) {
		t.Fatalf("the StatefulSet was written: the case proves nothing about a spec lull cannot restore")
	}
	s := &lullv1.Session{}
	if err := w.c.Get(ctx, w.key, s); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionUpToDate)
	if c == nil || c.Reason != lullv1.ReasonImageNotAllowed || !strings.Contains(c.Message, "cannot restore") {
		t.Errorf("UpToDate = %+v, want reason %s saying lull cannot restore the StatefulSet", c, lullv1.ReasonImageNotAllowed)
	}
}

// Outside a hold, a StatefulSet that carries an image the catalog has
// stopped listing (written while it was listed) is not rolled onto a new
// pod by lull: the session's Drained pod is kept, its drain withdrawn.
func TestNoPodIsReplacedOntoAnImageTheCatalogStoppedListing(t *testing.T) {
	ctx := context.Background()
	w := drainedWorld(t, apiServerStatefulSets(nil))
	createCatalog(t, w, "1")
	w.reconcileOK()
	if !w.podExists() {
		t.Errorf("the pod was deleted: its successor runs example.com/agent:2, which the catalog no longer lists")
	}
	s := &lullv1.Session{}
	if err := w.c.Get(ctx, w.key, s); err != nil {
		t.Fatal(err)
	}
	if s.Status.Drain != nil || s.Status.Replacement != nil {
		t.Errorf("drain %+v, replacement %+v; want the drain withdrawn and nothing committed", s.Status.Drain, s.Status.Replacement)
	}
}
