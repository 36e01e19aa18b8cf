package session

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync/atomic"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// driftWorld is the world after its first reconcile (the session's
// identity and Service rendered), its StatefulSets kept as the API server
// keeps them (apiServerStatefulSets, without a webhook), with the
// StatefulSet and Service writes that reach the store counted from then
// on.
func driftWorld(t *testing.T) (*world, *atomic.Int32) {
	return driftWorldWith(t, nil, interceptor.Funcs{})
}

// driftWorldWith is driftWorld with webhook, when not nil, run on every
// StatefulSet written (a mutating webhook), and funcs intercepting the
// client before the count and the API server's generations.
func driftWorldWith(t *testing.T, webhook func(*appsv1.StatefulSet), funcs interceptor.Funcs) (*world, *atomic.Int32) {
	t.Helper()
	var writes atomic.Int32
	counting := false
	server := apiServerStatefulSets(webhook)
	next := funcs.Patch
	funcs.Patch = func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
		switch o.(type) {
		case *appsv1.StatefulSet, *corev1.Service:
			if counting {
				writes.Add(1)
			}
		}
		if next != nil {
			return next(ctx, c, o, p, opts...)
		}
		return server.Patch(ctx, c, o, p, opts...)
	}
	if funcs.Update == nil {
		funcs.Update = server.Update
	}
	if funcs.Create == nil {
		funcs.Create = server.Create
	}
	w := newWorld(t, funcs, nil)
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	w.eventReasons()
	counting = true
	return w, &writes
}

// apiServerStatefulSets intercepts the fake client's writes of
// StatefulSets so that it keeps their metadata.generation as the API
// server does (the fake client keeps whatever the writer sends): 1 on
// create, one more on each write whose result has another spec, none on
// any other; and a UID on create, when the writer sent none. webhook, when not nil, changes each StatefulSet written
// before it is stored, as a mutating webhook does: in the same write, so
// at the generation that write produces.
func apiServerStatefulSets(webhook func(*appsv1.StatefulSet)) interceptor.Funcs {
	store := func(ctx context.Context, c client.WithWatch, old, sts *appsv1.StatefulSet, opts ...client.UpdateOption) error {
		if webhook != nil {
			webhook(sts)
		}
		sts.Generation = old.Generation
		if !equality.Semantic.DeepEqual(old.Spec, sts.Spec) {
			sts.Generation++
		}
		return c.Update(ctx, sts, opts...)
	}
	return interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
			if sts, ok := o.(*appsv1.StatefulSet); ok {
				if webhook != nil {
					webhook(sts)
				}
				sts.Generation = 1
				if sts.UID == "" {
					sts.UID = types.UID("sts-" + rand.Text())
				}
			}
			return c.Create(ctx, o, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
			sts, ok := o.(*appsv1.StatefulSet)
			if !ok {
				return c.Update(ctx, o, opts...)
			}
			old := &appsv1.StatefulSet{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(sts), old); err != nil {
				return err
			}
			return store(ctx, c, old, sts, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			sts, ok := o.(*appsv1.StatefulSet)
			if !ok {
				return c.Patch(ctx, o, p, opts...)
			}
			old := &appsv1.StatefulSet{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(sts), old); err != nil {
				return err
			}
			if err := c.Patch(ctx, sts, p, opts...); err != nil {
				return err
			}
			return store(ctx, c, old, sts)
		},
	}
}

// restart replaces the reconciler with a new one, as a controller process
// that starts (a rollout of lull itself, a leader failover) has: nothing
// in memory.
func (w *world) restart() {
	w.r = &Reconciler{Client: w.c, APIReader: w.c, Recorder: w.events, Clock: w.clock}
}

func (w *world) statefulSet() *appsv1.StatefulSet {
	w.t.Helper()
	sts := &appsv1.StatefulSet{}
	if err := w.c.Get(context.Background(), w.key, sts); err != nil {
		w.t.Fatal(err)
	}
	return sts
}

// handEdit stores edit's change of the session's StatefulSet as a second
// writer would: lull's annotations left as they were (in a driftWorld,
// the generation moves if the spec does).
func (w *world) handEdit(edit func(*appsv1.StatefulSet)) {
	w.t.Helper()
	sts := w.statefulSet()
	edit(sts)
	if err := w.c.Update(context.Background(), sts); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) count(reason string) int {
	n := 0
	for _, r := range w.eventReasons() {
		if r == reason {
			n++
		}
	}
	return n
}

// Each hand edit of a field lull renders on the StatefulSet, under an
// unchanged spec-hash annotation, is undone by the next reconcile with one
// Warning Event; the reconciles after it find nothing to write.
func TestHandEditOfTheStatefulSetIsRestoredWithOneEvent(t *testing.T) {
	for _, tc := range []struct {
		name     string
		edit     func(*appsv1.StatefulSet)
		restored func(*appsv1.StatefulSet) bool
	}{
		{"replicas scaled to 0", func(s *appsv1.StatefulSet) { s.Spec.Replicas = ptrTo(int32(0)) },
			func(s *appsv1.StatefulSet) bool { return s.Spec.Replicas != nil && *s.Spec.Replicas == 1 }},
		{"pod template label removed", func(s *appsv1.StatefulSet) { delete(s.Spec.Template.Labels, lullv1.LabelTemplateRevision) },
			func(s *appsv1.StatefulSet) bool { return s.Spec.Template.Labels[lullv1.LabelTemplateRevision] != "" }},
		{"StatefulSet label changed", func(s *appsv1.StatefulSet) { s.Labels[lullv1.LabelTemplate] = "other" },
			func(s *appsv1.StatefulSet) bool { return s.Labels[lullv1.LabelTemplate] == "agent" }},
		{"runtime image changed", func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.Containers[0].Image = "example.com/other:1" },
			func(s *appsv1.StatefulSet) bool {
				return s.Spec.Template.Spec.Containers[0].Image == "example.com/agent:2"
			}},
		{"update strategy changed", func(s *appsv1.StatefulSet) {
			s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType}
		}, func(s *appsv1.StatefulSet) bool {
			return s.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType
		}},
		{"runtime environment changed", func(s *appsv1.StatefulSet) {
			s.Spec.Template.Spec.Containers[0].Env = append(s.Spec.Template.Spec.Containers[0].Env, corev1.EnvVar{Name: "DEBUG", Value: "1"})
		}, func(s *appsv1.StatefulSet) bool {
			for _, e := range s.Spec.Template.Spec.Containers[0].Env {
				if e.Name == "DEBUG" {
					return false
				}
			}
			return true
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, writes := driftWorld(t)
			w.handEdit(tc.edit)
			if _, err := w.reconcile(); err != nil {
				t.Fatal(err)
			}
			if !tc.restored(w.statefulSet()) {
				t.Fatalf("StatefulSet not restored: %+v", w.statefulSet().Spec)
			}
			if n := w.count(lullv1.ReasonDriftCorrected); n != 1 {
				t.Errorf("%s Events = %d, want 1", lullv1.ReasonDriftCorrected, n)
			}
			before := writes.Load()
			for range 2 {
				if _, err := w.reconcile(); err != nil {
					t.Fatal(err)
				}
			}
			if writes.Load() != before {
				t.Errorf("restored StatefulSet written again by %d later reconciles", writes.Load()-before)
			}
			if n := w.count(lullv1.ReasonDriftCorrected); n != 0 {
				t.Errorf("%d more %s Events after the restore", n, lullv1.ReasonDriftCorrected)
			}
		})
	}
}

// The Service's selector and ports are lull's too.
func TestHandEditOfTheServiceIsRestoredWithOneEvent(t *testing.T) {
	w, writes := driftWorld(t)
	svc := &corev1.Service{}
	if err := w.c.Get(context.Background(), w.key, svc); err != nil {
		t.Fatal(err)
	}
	svc.Spec.Selector = map[string]string{"app": "other"}
	if err := w.c.Update(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Get(context.Background(), w.key, svc); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Selector[lullv1.LabelSession] != "alice" || len(svc.Spec.Selector) != 1 {
		t.Errorf("Service selector = %v, want lull's", svc.Spec.Selector)
	}
	if n := w.count(lullv1.ReasonDriftCorrected); n != 1 {
		t.Errorf("%s Events = %d, want 1", lullv1.ReasonDriftCorrected, n)
	}
	before := writes.Load()
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if writes.Load() != before {
		t.Error("restored Service written again")
	}
}

// A Service port's target is lull's too: lull renders none, so the API
// server makes it the port itself, the runtime's container port of that
// number. Another writer that points it elsewhere has the session's
// address reach nothing (or another process); it is put back with one
// Event. Before, targetPort was not compared at all.
func TestServiceTargetPortEditIsRestoredWithOneEvent(t *testing.T) {
	ctx := context.Background()
	w, writes := driftWorld(t)
	tmpl := w.template()
	tmpl.Spec.Template.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	if err := w.c.Update(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	w.reconcileOK()
	svc := &corev1.Service{}
	if err := w.c.Get(ctx, w.key, svc); err != nil {
		t.Fatal(err)
	}
	if len(svc.Spec.Ports) != 1 {
		t.Fatalf("Service ports = %+v, want the runtime's http port", svc.Spec.Ports)
	}
	w.eventReasons()
	svc.Spec.Ports[0].TargetPort = intstr.FromInt32(9090)
	if err := w.c.Update(ctx, svc); err != nil {
		t.Fatal(err)
	}
	w.reconcileOK()
	if err := w.c.Get(ctx, w.key, svc); err != nil {
		t.Fatal(err)
	}
	if tp := svc.Spec.Ports[0].TargetPort; tp != (intstr.IntOrString{}) && tp != intstr.FromInt32(8080) {
		t.Errorf("targetPort = %s, want the port itself (8080)", tp.String())
	}
	if n := w.count(lullv1.ReasonDriftCorrected); n != 1 {
		t.Errorf("%s Events = %d, want 1", lullv1.ReasonDriftCorrected, n)
	}
	before := writes.Load()
	w.reconcileOK()
	if writes.Load() != before {
		t.Error("restored Service written again")
	}
}

// A fleet whose objects nobody edited costs no write (and no Event) per
// reconcile.
func TestUnchangedObjectsCostNoWrite(t *testing.T) {
	w, writes := driftWorld(t)
	for range 3 {
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	if writes.Load() != 0 {
		t.Errorf("%d StatefulSet or Service writes with nothing changed", writes.Load())
	}
	if n := w.count(lullv1.ReasonDriftCorrected); n != 0 {
		t.Errorf("%d %s Events with nothing changed", n, lullv1.ReasonDriftCorrected)
	}
}

// A StatefulSet whose generation is the one lull's own last write left has
// the spec lull wrote, as admission left it: a webhook that rewrote its
// image to a digest in lull's write is not fought on every reconcile.
func TestAdmissionRewriteOfLullsOwnWriteIsNotFought(t *testing.T) {
	w, writes := driftWorldWith(t, digests, interceptor.Funcs{})
	w.setImage("example.com/agent:3")
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if got := w.statefulSet().Spec.Template.Spec.Containers[0].Image; got != digestOf("example.com/agent:3") {
		t.Fatalf("image = %s, want admission's %s", got, digestOf("example.com/agent:3"))
	}
	before := writes.Load()
	for range 3 {
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	if n := writes.Load() - before; n != 0 {
		t.Errorf("%d writes against admission's form of lull's own write", n)
	}
	if n := w.count(lullv1.ReasonDriftCorrected); n != 0 {
		t.Errorf("%d %s Events for admission's form of lull's own write", n, lullv1.ReasonDriftCorrected)
	}
}

// digests is a mutating webhook that pins every image of a StatefulSet's
// pod template to a digest (digestOf).
func digests(sts *appsv1.StatefulSet) {
	for i, c := range sts.Spec.Template.Spec.Containers {
		sts.Spec.Template.Spec.Containers[i].Image = digestOf(c.Image)
	}
}

// digestOf is the image pinned to a digest of its tag; an image pinned
// already is left as it is.
func digestOf(image string) string {
	if strings.Contains(image, "@") {
		return image
	}
	sum := sha256.Sum256([]byte(image))
	return strings.SplitN(image, ":", 2)[0] + "@sha256:" + hex.EncodeToString(sum[:8])
}

// setImage changes the session template's runtime image, as its author
// would.
func (w *world) setImage(image string) {
	w.t.Helper()
	tmpl := w.template()
	tmpl.Spec.Template.Spec.Containers[0].Image = image
	if err := w.c.Update(context.Background(), tmpl); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) reconcileOK() {
	w.t.Helper()
	if _, err := w.reconcile(); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) template() *lullv1.SessionTemplate {
	w.t.Helper()
	tmpl := &lullv1.SessionTemplate{}
	if err := w.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "agent"}, tmpl); err != nil {
		w.t.Fatal(err)
	}
	return tmpl
}
