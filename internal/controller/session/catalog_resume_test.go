package session

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/catalog/catalogtest"
)

// docs/catalog.md: "A suspended session whose last image is not allowed
// either does not resume." The common way to get there: the template moved
// to v2 while v2 was listed, the session's StatefulSet was written with v2
// (at once, as every rollout does), the session was suspended (scaled to
// zero), and then the catalog dropped v2. The StatefulSet's image is the
// template's image, and neither is allowed: resuming would start a new pod
// on an image the catalog refuses.
func TestGateImageKeepsSuspendedSessionDownWhenItsStatefulSetCarriesTheRefusedImage(t *testing.T) {
	const refused = "registry.example.com/agent-runtime:v3" // not in catalogtest.Catalog
	tmpl := &lullv1.SessionTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: catalogtest.NamespaceA, Name: "rt"},
		Spec: lullv1.SessionTemplateSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: lullv1.RuntimeContainerName, Image: refused}}}}},
	}
	suspended := &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](0), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: lullv1.RuntimeContainerName, Image: refused}}}}}}

	g := GateImage(catalogtest.Catalog(), tmpl, suspended, 1)
	if !g.Block {
		t.Fatalf("resume onto %s, which the catalog does not list: %+v, want Block (no pod created)", refused, g)
	}
	for _, part := range []string{refused, `RuntimeCatalog "default"`, "does not resume"} {
		if !strings.Contains(g.Message, part) {
			t.Errorf("message %q lacks %q", g.Message, part)
		}
	}

	// Staying suspended, or running on, is not the catalog's business.
	if g := GateImage(catalogtest.Catalog(), tmpl, suspended, 0); g.Block {
		t.Errorf("staying suspended: %+v, want no Block", g)
	}
	running := suspended.DeepCopy()
	running.Spec.Replicas = ptr.To[int32](1)
	if g := GateImage(catalogtest.Catalog(), tmpl, running, 1); g.Block || g.Hold {
		t.Errorf("running on an image written while allowed: %+v, want left as it is", g)
	}
}
