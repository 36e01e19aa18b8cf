package session

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/catalog/catalogtest"
)

// agentCatalog is the RuntimeCatalog listing example.com/agent at tags
// only: the image a test's template names is allowed or refused by the
// tags it passes.
func agentCatalog(tags ...string) *lullv1.RuntimeCatalog {
	return &lullv1.RuntimeCatalog{ObjectMeta: metav1.ObjectMeta{Name: lullv1.RuntimeCatalogName},
		Spec: lullv1.RuntimeCatalogSpec{Images: []lullv1.CatalogImage{{Repository: "example.com/agent", Tags: tags}}}}
}

// createCatalog stores agentCatalog(tags...) on the API server and
// returns it, for a test that narrows or widens it later.
func createCatalog(t *testing.T, w *world, tags ...string) *lullv1.RuntimeCatalog {
	t.Helper()
	cat := agentCatalog(tags...)
	if err := w.c.Create(context.Background(), cat); err != nil {
		t.Fatal(err)
	}
	return cat
}

func TestGateImage(t *testing.T) {
	const (
		listed    = "registry.example.com/agent-runtime:v1"
		listedToo = "registry.example.com/agent-runtime:v2"
		unlisted  = "registry.example.com/agent-runtime:v3"
		gone      = "registry.example.com/agent-runtime:v0"
	)
	tmpl := func(image string) *lullv1.SessionTemplate {
		return &lullv1.SessionTemplate{
			ObjectMeta: metav1.ObjectMeta{Namespace: catalogtest.NamespaceA, Name: "rt"},
			Spec: lullv1.SessionTemplateSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: lullv1.RuntimeContainerName, Image: image}}}}},
		}
	}
	sts := func(image string, replicas int32) *appsv1.StatefulSet {
		return &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(replicas), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "proxy", Image: "x"}, {Name: lullv1.RuntimeContainerName, Image: image}}}}}}
	}
	cat := catalogtest.Catalog()
	for _, tc := range []struct {
		name        string
		cat         *lullv1.RuntimeCatalog
		image       string
		sts         *appsv1.StatefulSet
		replicas    int32
		hold, block bool
		msg         string
	}{
		{"no catalog, new session", nil, unlisted, nil, 1, false, false, ""},
		{"listed, new session", cat, listed, nil, 1, false, false, ""},
		{"listed, update", cat, listedToo, sts(listed, 1), 1, false, false, ""},
		{"unlisted, new session: no pod", cat, unlisted, nil, 1, false, true, "no pod is created"},
		{"unlisted, running: StatefulSet held", cat, unlisted, sts(listed, 1), 1, true, false, "keeps " + listed},
		{"unlisted, already written while allowed: left as it is", cat, unlisted, sts(unlisted, 1), 1, false, false, ""},
		{"unlisted, suspending: held, scaled down", cat, unlisted, sts(listed, 1), 0, true, false, ""},
		{"unlisted, resuming on a listed image: held", cat, unlisted, sts(listed, 0), 1, true, false, ""},
		{"unlisted, resuming on an unlisted image: no pod", cat, unlisted, sts(gone, 0), 1, false, true, "does not resume"},
		{"unlisted, running an unlisted image: held, not stopped", cat, unlisted, sts(gone, 1), 1, true, false, ""},
	} {
		g := GateImage(tc.cat, tmpl(tc.image), tc.sts, tc.replicas)
		if g.Hold != tc.hold || g.Block != tc.block {
			t.Errorf("%s: %+v, want hold %v block %v", tc.name, g, tc.hold, tc.block)
		}
		if (g.Hold || g.Block) && !strings.Contains(g.Message, `RuntimeCatalog "default"`) {
			t.Errorf("%s: message %q does not name the catalog", tc.name, g.Message)
		}
		if !strings.Contains(g.Message, tc.msg) {
			t.Errorf("%s: message %q lacks %q", tc.name, g.Message, tc.msg)
		}
	}
}
