package session

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// TestRenderFailedLeavesTheServiceAlone: a template change that fails at
// render (RenderFailed) touches nothing that runs (docs/templates.md). The
// session's Service routes to the running pod: it keeps the ports of the
// last template that rendered, not those of the refused one.
func TestRenderFailedLeavesTheServiceAlone(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, nil)
	ctx := context.Background()
	tmpl := &lullv1.SessionTemplate{}
	key := types.NamespacedName{Namespace: "ns", Name: "agent"}
	if err := w.c.Get(ctx, key, tmpl); err != nil {
		t.Fatal(err)
	}
	tmpl.RuntimeContainer().Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	if err := w.c.Update(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	// The next version moves the port and, by mistake, sets a reserved
	// variable: it fails at render.
	if err := w.c.Get(ctx, key, tmpl); err != nil {
		t.Fatal(err)
	}
	rt := tmpl.RuntimeContainer()
	rt.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 9090}}
	rt.Env = []corev1.EnvVar{{Name: "LULL_DEBUG", Value: "1"}}
	if err := w.c.Update(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(w.session().Status.Conditions, lullv1.ConditionReady); c == nil || c.Reason != "RenderFailed" {
		t.Fatalf("Ready = %+v, want RenderFailed", c)
	}
	svc := &corev1.Service{}
	if err := w.c.Get(ctx, w.key, svc); err != nil {
		t.Fatal(err)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8080 {
		t.Errorf("Service ports = %+v after RenderFailed, want the running template's port 8080", svc.Spec.Ports)
	}
}
