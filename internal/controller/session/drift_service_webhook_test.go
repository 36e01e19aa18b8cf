package session

import (
	"context"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Guarantee 5 of issue 21: drift is corrected, and defaulting or
// admission that rewrites what lull writes is not mistaken for drift on
// every reconcile.
//
// The StatefulSet is spared this by its generation (aa2d2b1); the Service
// is not. A mutating webhook that adds a port to every Service (a mesh's
// metrics port, a policy engine's) rewrites lull's restore the same way
// each time: serviceDrift finds the ports differ on every reconcile, and
// every reconcile of the session costs a live GET and a PATCH of its
// Service that the API server stores as a no-op. At 5,000 sessions, every
// session event is two more requests, for ever.
func TestAdmissionRewriteOfTheServiceIsNotFoughtEveryReconcile(t *testing.T) {
	var writes atomic.Int32
	counting := false
	mutate := func(svc *corev1.Service) {
		for _, p := range svc.Spec.Ports {
			if p.Name == "mesh-metrics" {
				return
			}
		}
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "mesh-metrics", Port: 15090, Protocol: corev1.ProtocolTCP})
	}
	w := newWorld(t, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
			if svc, ok := o.(*corev1.Service); ok {
				mutate(svc) // the webhook, on create
			}
			return c.Create(ctx, o, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			svc, ok := o.(*corev1.Service)
			if !ok {
				return c.Patch(ctx, o, p, opts...)
			}
			if counting {
				writes.Add(1)
			}
			// The webhook adds its port back to what lull's patch leaves:
			// the result is the stored Service, a no-op the API server
			// answers with the object as it was (no new resourceVersion).
			return c.Get(ctx, client.ObjectKeyFromObject(svc), svc)
		},
	}, nil)
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	counting = true
	for range 3 {
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	if n := writes.Load(); n != 0 {
		t.Errorf("%d Service writes in 3 reconciles against a webhook's constant rewrite", n)
	}
	if n := w.count(lullv1.ReasonDriftCorrected); n != 0 {
		t.Logf("%d DriftCorrected Events", n)
	}
}

// A change of one of lull's ports is still drift, and writing lull's
// ports back keeps the port another party added.
func TestServicePortDriftIsUndoneKeepingOthersPorts(t *testing.T) {
	lulls := []corev1.ServicePort{{Name: "http", Port: 8080}}
	mesh := corev1.ServicePort{Name: "mesh-metrics", Port: 15090, Protocol: corev1.ProtocolTCP}
	desired := &corev1.Service{Spec: corev1.ServiceSpec{Ports: lulls}}
	svc := func(ports ...corev1.ServicePort) *corev1.Service {
		return &corev1.Service{Spec: corev1.ServiceSpec{Ports: ports}}
	}
	if f := serviceDrift(svc(mesh, corev1.ServicePort{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}), desired); f != "" {
		t.Errorf("another party's port (before lull's, protocol defaulted) is drift: %s", f)
	}
	if f := serviceDrift(svc(corev1.ServicePort{Name: "http", Port: 9090}, mesh), desired); f == "" {
		t.Error("lull's port renumbered is not drift")
	}
	if f := serviceDrift(svc(mesh), desired); f == "" {
		t.Error("lull's port removed is not drift")
	}
	// The target lull renders is the port itself (left unset, the API
	// server's default).
	if f := serviceDrift(svc(corev1.ServicePort{Name: "http", Port: 8080, TargetPort: intstr.FromInt32(8080)}), desired); f != "" {
		t.Errorf("lull's port with its target defaulted is drift: %s", f)
	}
	for _, target := range []intstr.IntOrString{intstr.FromInt32(9090), intstr.FromString("metrics")} {
		if f := serviceDrift(svc(corev1.ServicePort{Name: "http", Port: 8080, TargetPort: target}), desired); f == "" {
			t.Errorf("lull's port targeted at %s is not drift", target.String())
		}
	}
	got := servicePorts([]corev1.ServicePort{{Name: "http", Port: 9090}, mesh}, lulls)
	if len(got) != 2 || got[0] != lulls[0] || got[1] != mesh {
		t.Errorf("ports written = %+v, want lull's then %s", got, mesh.Name)
	}
}
