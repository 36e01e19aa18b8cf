package template

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/testenv"
	"lull.dev/lull/internal/index"
)

// memoryWorld is a template reconciler on a fake store, for what it holds
// in memory of templates and sessions that go.
type memoryWorld struct {
	t     *testing.T
	c     client.WithWatch
	r     *Reconciler
	clock *clocktesting.FakePassiveClock
	key   types.NamespacedName
}

func newMemoryWorld(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) *memoryWorld {
	t.Helper()
	sch := testenv.Scheme()
	base := fake.NewClientBuilder().WithScheme(sch).WithObjects(objs...).
		WithStatusSubresource(&lullv1.SessionTemplate{}, &lullv1.Session{}).
		WithIndex(&lullv1.Session{}, index.SessionTemplateName, index.SessionTemplateNameOf).
		Build()
	c := interceptor.NewClient(base, funcs)
	clock := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	return &memoryWorld{t: t, c: c, r: &Reconciler{Client: c, Clock: clock}, clock: clock, key: types.NamespacedName{Namespace: "ns", Name: "agent"}}
}

func (w *memoryWorld) reconcile() ctrl.Result {
	w.t.Helper()
	res, err := w.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: w.key})
	if err != nil {
		w.t.Fatal(err)
	}
	return res
}

func (w *memoryWorld) del(o client.Object) {
	w.t.Helper()
	if err := w.c.Delete(context.Background(), o); err != nil {
		w.t.Fatal(err)
	}
}

func (w *memoryWorld) create(o client.Object) {
	w.t.Helper()
	o.SetResourceVersion("")
	if err := w.c.Create(context.Background(), o); err != nil {
		w.t.Fatal(err)
	}
}

func memoryTemplate(uid types.UID) *lullv1.SessionTemplate {
	return &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "agent", UID: uid},
		Spec: lullv1.SessionTemplateSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: lullv1.RuntimeContainerName, Image: "i:1"}}}}}}
}

func memorySession(name string, uid types.UID) *lullv1.Session {
	return &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: uid},
		Spec: lullv1.SessionSpec{TemplateRef: lullv1.TemplateReference{Name: "agent"}}}
}

// The drain clock holds a session's drain start only while the session is
// among its template's sessions: one deleted mid-drain is forgotten at the
// next recount, and a session that takes its name later (the same name,
// another UID) never inherits the start. Before, the start stayed for the
// life of the process, and the new session, once up to date, was measured
// as a move months long that dragged status.expectedCompletion.
func TestDrainClockForgetsASessionDeletedMidDrain(t *testing.T) {
	w := newMemoryWorld(t, interceptor.Funcs{}, memoryTemplate("t-1"))
	alice := memorySession("alice", "alice-1")
	alice.Status.Drain = &lullv1.DrainRequest{RequestID: "update-0123456789abcdef", Reason: lullv1.DrainReasonUpdate, RequestedAt: metav1.NewTime(w.clock.Now().Add(-time.Minute))}
	w.create(alice)
	w.reconcile()
	if got := heldDrainStarts(w.r, w.key); got != 1 {
		t.Fatalf("drain starts held: %d, want alice's", got)
	}

	w.del(alice)
	w.clock.SetTime(w.clock.Now().Add(10 * time.Second))
	w.reconcile()
	if got := heldDrainStarts(w.r, w.key); got != 0 {
		t.Errorf("drain starts held after alice was deleted: %d, want none", got)
	}

	// Months later a new alice, up to date, shows up.
	again := memorySession("alice", "alice-2")
	again.Status.Conditions = []metav1.Condition{{Type: lullv1.ConditionUpToDate, Status: metav1.ConditionTrue, Reason: lullv1.ReasonUpToDate, LastTransitionTime: metav1.NewTime(w.clock.Now())}}
	w.create(again)
	w.clock.SetTime(w.clock.Now().Add(90 * 24 * time.Hour))
	w.reconcile()
	if mean, measured := w.r.drains.meanOf(w.key); measured {
		t.Errorf("mean move time %s measured; no move finished (the first alice was deleted mid-drain, the second never drained)", mean)
	}
}

// A session deleted mid-drain whose name is taken again before the
// template is recounted (the two events reach one recount) is told apart
// by its UID.
func TestDrainClockDoesNotReuseADrainStartForANewSessionOfTheName(t *testing.T) {
	w := newMemoryWorld(t, interceptor.Funcs{}, memoryTemplate("t-1"))
	alice := memorySession("alice", "alice-1")
	alice.Status.Drain = &lullv1.DrainRequest{RequestID: "update-0123456789abcdef", Reason: lullv1.DrainReasonUpdate, RequestedAt: metav1.NewTime(w.clock.Now().Add(-time.Minute))}
	w.create(alice)
	w.reconcile()

	w.del(alice)
	again := memorySession("alice", "alice-2")
	again.Status.Conditions = []metav1.Condition{{Type: lullv1.ConditionUpToDate, Status: metav1.ConditionTrue, Reason: lullv1.ReasonUpToDate, LastTransitionTime: metav1.NewTime(w.clock.Now())}}
	w.create(again)
	w.clock.SetTime(w.clock.Now().Add(30 * 24 * time.Hour))
	w.reconcile()
	if mean, measured := w.r.drains.meanOf(w.key); measured {
		t.Errorf("mean move time %s measured from the first alice's drain start on the second alice", mean)
	}
	if got := heldDrainStarts(w.r, w.key); got != 0 {
		t.Errorf("drain starts held: %d, want none", got)
	}
}

// What the reconciler holds of a template (its last status write, its
// drain clock) goes with the template, and so do the metric series kept
// by template elsewhere (ForgetTemplateMetrics, called once it is gone);
// a template that takes the name again is a new one: its first status is
// written at once, not spaced after the write of the template it replaced.
func TestTemplateMemoryIsDroppedWithTheTemplate(t *testing.T) {
	w := newMemoryWorld(t, interceptor.Funcs{}, memoryTemplate("t-1"))
	var forgotten []string
	w.r.ForgetTemplateMetrics = func(namespace, name string) { forgotten = append(forgotten, namespace+"/"+name) }
	w.reconcile()
	if heldWrites(w.r) != 1 || !heldDrainClock(w.r, w.key) {
		t.Fatalf("precondition: the reconciler holds the template's last write (%d) and drain clock (%v)", heldWrites(w.r), heldDrainClock(w.r, w.key))
	}
	if len(forgotten) != 0 {
		t.Fatalf("metrics of a live template forgotten: %v", forgotten)
	}
	w.del(memoryTemplate("t-1"))
	w.reconcile()
	if heldWrites(w.r) != 0 || heldDrainClock(w.r, w.key) {
		t.Errorf("after the template was deleted the reconciler still holds its last write (%d held) or drain clock (%v)", heldWrites(w.r), heldDrainClock(w.r, w.key))
	}
	if want := w.key.String(); len(forgotten) != 1 || forgotten[0] != want {
		t.Errorf("metrics forgotten for %v after the template was deleted, want %s once", forgotten, want)
	}

	// Deleted and created again between two reconciles, at the same
	// instant as the last write: the new template's status is written.
	w.create(memoryTemplate("t-2"))
	w.reconcile()
	w.del(memoryTemplate("t-2"))
	w.create(memoryTemplate("t-3"))
	if res := w.reconcile(); res.RequeueAfter > 0 && res.RequeueAfter <= MinWriteInterval {
		t.Errorf("the new template's status write waits %s, spaced after the write of the template it replaced", res.RequeueAfter)
	}
	got := &lullv1.SessionTemplate{}
	if err := w.c.Get(context.Background(), w.key, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Revision == "" {
		t.Error("the new template's status was not written")
	}
}

// A refused files ConfigMap backs off per template; a template that takes
// the name of a deleted one (same files, so the same ConfigMap name) is
// tried at once, not after the backoff the deleted one had earned.
func TestFilesBackoffIsNotInheritedByANewTemplateOfTheName(t *testing.T) {
	var full atomic.Bool
	full.Store(true)
	var creates atomic.Int32
	w := newMemoryWorld(t, interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
		if _, ok := o.(*corev1.ConfigMap); ok {
			creates.Add(1)
			if full.Load() {
				return apierrors.NewForbidden(corev1.Resource("configmaps"), o.GetName(), errors.New("exceeded quota: q, requested: count/configmaps=1, used: count/configmaps=1, limited: count/configmaps=1"))
			}
		}
		return c.Create(ctx, o, opts...)
	}})
	first := filesTemplate("a")
	first.UID = "t-1"
	w.create(first)
	w.reconcile()
	if creates.Load() != 1 {
		t.Fatalf("creates = %d, want the one refused", creates.Load())
	}
	full.Store(false)
	w.del(first)
	second := filesTemplate("a")
	second.UID = "t-2"
	w.create(second)
	w.reconcile()
	if creates.Load() != 2 {
		t.Fatalf("creates = %d: the new template of the name waits out the backoff of the deleted one instead of trying at once", creates.Load())
	}
}
