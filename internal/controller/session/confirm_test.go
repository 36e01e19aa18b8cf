package session

import (
	"context"
	"sync/atomic"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/render"
)

// Rule 9 (while the catalog refuses the StatefulSet's runtime image,
// lull never replaces a pod onto it) and the drift rule (another writer's
// StatefulSet edit is restored before any step, or no step is taken),
// against a lagging cache: every destructive step is judged on the
// StatefulSet as the API server holds it (confirmStatefulSet).
//
// Here another writer has set the StatefulSet's runtime image to
// evil.example.com/miner:1, which the catalog does not list; the
// StatefulSet informer has not delivered that edit yet, while the
// runtime's Drained report has arrived. The cache shows lull's own spec
// on an allowed image, so the decision is to commit the drained
// replacement and delete the pod; were it carried out, the StatefulSet
// controller would create the successor from the API server's template,
// on the refused image, and no drift would ever be told. (Found by the
// third review, which committed this test failing.)
func TestNoPodIsReplacedOntoARefusedImageTheStatefulSetCacheHasNotShownYet(t *testing.T) {
	var live atomic.Bool
	var cached atomic.Pointer[appsv1.StatefulSet] // the informer's copy, once it lags
	w := laggingWorld(t, &live, &cached, drainedReport)
	createCatalog(t, w, "2")
	cached.Store(w.statefulSet()) // lull's own spec on agent:2; the informer stops here
	const evil = "evil.example.com/miner:1"
	live.Store(true) // the second writer and the StatefulSet controller see the API server
	w.handEdit(func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.Containers[0].Image = evil })
	observe(t, w)
	live.Store(false)

	w.reconcileOK()

	live.Store(true)
	got := runtimeImage(w.statefulSet())
	live.Store(false)
	if got == evil && !w.podExists() {
		t.Errorf("lull deleted the session's pod while the API server's StatefulSet runs %s, an image the catalog does not list (its cache still showed agent:2): the successor runs it", evil)
	}
	if rep := w.session().Status.Replacement; rep != nil {
		t.Errorf("status.replacement = %+v, want none: a commitment is finished whoever acts next, so it must not land on a StatefulSet the decision did not see", rep)
	}

	// The cache catches up: the next reconcile restores lull's spec, as
	// for any other writer's edit, before any step.
	cached.Store(nil)
	w.reconcileOK()
	if got := runtimeImage(w.statefulSet()); got == evil {
		t.Errorf("runtime image = %s once the cache shows the edit, want lull's own restored", got)
	}
	if w.count(lullv1.ReasonDriftCorrected) == 0 {
		t.Errorf("events = %v, want a DriftCorrected Event for the edit", w.eventReasons())
	}
}

// The catalog is read from the cache too (catalog.Read on the manager's
// client), and the decision's refusal (rollout.Observed.ImageRefused)
// with it: a catalog narrowed a moment before the runtime's Drained report
// arrives, its informer not yet delivered, would have the drained pod
// replaced onto the image it now refuses. The catalog is one object, read
// from the API server with the StatefulSet before a destructive step.
func TestNoPodIsReplacedOntoAnImageTheCatalogCacheStillLists(t *testing.T) {
	ctx := context.Background()
	var live atomic.Bool
	var cached atomic.Pointer[lullv1.RuntimeCatalog] // the informer's copy, once it lags
	w := laggingWorld(t, &live, &cached, drainedReport)
	cat := createCatalog(t, w, "2")
	cached.Store(cat.DeepCopy()) // lists agent:2; the informer stops here
	cat.Spec.Images[0].Tags = []string{"3"}
	if err := w.c.Update(ctx, cat); err != nil {
		t.Fatal(err)
	}
	observe(t, w)

	w.reconcileOK()

	if !w.podExists() {
		t.Errorf("lull deleted the session's pod while the API server's catalog no longer lists example.com/agent:2, the image its StatefulSet holds (the cache still listed it): the successor runs it")
	}
	if rep := w.session().Status.Replacement; rep != nil {
		t.Errorf("status.replacement = %+v, want none on an image the API server's catalog refuses", rep)
	}

	// Once the cache shows the narrowed catalog, the decision itself
	// withholds the replacement (rule 9).
	cached.Store(nil)
	w.reconcileOK()
	if !w.podExists() {
		t.Error("pod deleted once the cache shows the catalog refusing its image")
	}
	if got := conditionReason(w.session().Status.Conditions, lullv1.ConditionUpToDate); got != lullv1.ReasonImageNotAllowed {
		t.Errorf("UpToDate reason = %q, want %q", got, lullv1.ReasonImageNotAllowed)
	}
}

// statefulSetMoved tells a step decided on one copy of the StatefulSet
// from the API server's, in each thing the decision judges, and only
// those: a status change (another resourceVersion) is not one.
func TestStatefulSetMovedJudgesWhatTheDecisionJudged(t *testing.T) {
	own := func(generation int64) *appsv1.StatefulSet {
		return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice", UID: "sts-1", Generation: generation, ResourceVersion: "10",
			Annotations: map[string]string{render.AnnotationSpecHash: "h1", lullv1.AnnotationSpecWritten: formatSpecWritten(generation, "h1", "sts-1")}}}
	}
	const refused = "StatefulSet alice runs evil:1: not listed"
	for _, tc := range []struct {
		name                        string
		decided, live               *appsv1.StatefulSet
		decidedRefused, liveRefused string
		moved                       bool
	}{
		{name: "same copy", decided: own(2), live: own(2)},
		{name: "status moved only", decided: own(2), live: func() *appsv1.StatefulSet { s := own(2); s.ResourceVersion = "11"; s.Status.Replicas = 1; return s }()},
		{name: "both refused alike", decided: own(2), live: own(2), decidedRefused: refused, liveRefused: refused},
		{name: "neither exists", decided: nil, live: nil},
		{name: "spec changed (generation)", decided: own(2), live: func() *appsv1.StatefulSet { s := own(2); s.Generation = 3; return s }(), moved: true},
		{name: "created again", decided: own(2), live: func() *appsv1.StatefulSet { s := own(2); s.UID = "sts-2"; return s }(), moved: true},
		{name: "gone", decided: own(2), live: nil, moved: true},
		{name: "created since", decided: nil, live: own(1), moved: true},
		{name: "spec-hash annotation edited", decided: own(2), live: func() *appsv1.StatefulSet { s := own(2); s.Annotations[render.AnnotationSpecHash] = "h0"; return s }(), moved: true},
		{name: "record removed", decided: own(2), live: func() *appsv1.StatefulSet { s := own(2); delete(s.Annotations, lullv1.AnnotationSpecWritten); return s }(), moved: true},
		{name: "catalog narrowed", decided: own(2), live: own(2), liveRefused: refused, moved: true},
		{name: "catalog widened", decided: own(2), live: own(2), decidedRefused: refused, moved: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := statefulSetMoved(tc.decided, tc.decidedRefused, tc.live, tc.liveRefused)
			if (got != "") != tc.moved {
				t.Errorf("statefulSetMoved = %q, want moved %v", got, tc.moved)
			}
		})
	}
}

// judgedOnLiveCatalog: a write that changes the runtime image, creates the
// StatefulSet or raises it from zero is judged on the API server's
// catalog; one that moves only replicas, above zero or down to it, is not.
func TestOnlyWritesThatStartAPodOrChangeItsImageAreJudgedOnTheLiveCatalog(t *testing.T) {
	sts := func(image string, replicas int32) *appsv1.StatefulSet {
		return &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: &replicas,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: lullv1.RuntimeContainerName, Image: image}}}}}}
	}
	for _, tc := range []struct {
		name          string
		live, written *appsv1.StatefulSet
		want          bool
	}{
		{"create at one replica", nil, sts("a:1", 1), true},
		{"create at zero replicas", nil, sts("a:1", 0), true},
		{"resume", sts("a:1", 0), sts("a:1", 1), true},
		{"image change at one replica", sts("a:1", 1), sts("a:2", 1), true},
		{"image change at zero replicas", sts("a:1", 0), sts("a:2", 0), true},
		{"suspension", sts("a:1", 1), sts("a:1", 0), false},
		{"other field at one replica", sts("a:1", 1), sts("a:1", 1), false},
	} {
		if got := judgedOnLiveCatalog(tc.live, tc.written); got != tc.want {
			t.Errorf("%s: judgedOnLiveCatalog = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// laggingWorld is newWorld (edit changes the session) whose client lags
// the API server for objects of cached's type, as an informer that has
// stopped delivering does: while live is false a Get of that type answers
// with the copy cached holds (laggingGet). Its APIReader reads the API
// server (liveReader). A test makes the cache lag by storing a copy.
func laggingWorld[T any, PT interface {
	*T
	client.Object
	DeepCopyInto(PT)
}](t *testing.T, live *atomic.Bool, cached *atomic.Pointer[T], edit func(s *lullv1.Session, pod *corev1.Pod)) *world {
	t.Helper()
	funcs := apiServerStatefulSets(nil)
	funcs.Get = laggingGet[T, PT](live, cached)
	w := newWorld(t, funcs, edit)
	w.r.APIReader = liveReader{c: w.c, live: live}
	return w
}

// laggingGet is a Get interceptor for objects of cached's type: while
// live is false and cached holds a copy, a Get of that type answers with
// that copy, as an informer that has not yet delivered the newer version
// does; every other Get, and every Get once live is set, goes to the
// store.
func laggingGet[T any, PT interface {
	*T
	client.Object
	DeepCopyInto(PT)
}](live *atomic.Bool, cached *atomic.Pointer[T]) func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
	return func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
		if obj, ok := o.(PT); ok && !live.Load() {
			if old := cached.Load(); old != nil {
				PT(old).DeepCopyInto(obj)
				return nil
			}
		}
		return c.Get(ctx, key, o, opts...)
	}
}
