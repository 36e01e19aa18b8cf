package session

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
)

// requeue adds req back to q after a reconcile that returned result and
// err, as controller-runtime's reconcileHandler does with a priority
// queue: at result.Priority when set, else at the priority the item was
// handed out with (handed). The delay is shortened so the test need not
// wait it out; the order is what is checked.
func requeue(q priorityqueue.PriorityQueue[reconcile.Request], req reconcile.Request, handed int, result reconcile.Result, err error) {
	p := handed
	if result.Priority != nil {
		p = *result.Priority
	}
	if err == nil && result.RequeueAfter <= 0 {
		return
	}
	q.AddWithOpts(priorityqueue.AddOpts{After: time.Millisecond, Priority: &p}, req)
}

// DrainedPriority is for the reconcile that commits a drained runtime's
// replacement, not for every later look at that session: the look-again the
// reconcile asks for (here the settle delay after the delete; for a running
// session, each of its cull and lifetime timers) goes at the default
// priority, behind a session just admitted to the wave.
func TestDrainedSessionLooksAgainAtTheDefaultPriority(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, func(s *lullv1.Session, pod *corev1.Pod) {
		id := drain.RequestID(pod.UID, lullv1.DrainReasonUpdate, 1)
		s.Status.DrainSequence = 1
		s.Status.Drain = &lullv1.DrainRequest{RequestID: id, PodUID: pod.UID, Reason: lullv1.DrainReasonUpdate, Revision: "alice-new", Sequence: 1, RequestedAt: metav1.NewTime(t0)}
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, RequestID: id, State: lullv1.RuntimeDrained, RefreshSeconds: 10}
	})
	// An idle policy: the session's cull timer is a look-again.
	setIdlePolicy(t, w, lullv1.IdlePolicy{SuspendAfter: &metav1.Duration{Duration: 30 * time.Minute}})
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	req := reconcile.Request{NamespacedName: w.key}
	addWithPriority(q, req, DrainedPriority)
	item, handed, _ := q.GetWithPriority()
	result, err := w.r.Reconcile(context.Background(), item)
	if err != nil {
		t.Fatal(err)
	}
	if w.podExists() || result.RequeueAfter <= 0 {
		t.Fatalf("precondition: the Drained reconcile deletes the pod and looks again later; pod left %v, result %+v", w.podExists(), result)
	}
	requeue(q, item, handed, result, err)
	q.Done(item)
	admitted := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "admitted"}}
	addWithPriority(q, admitted, AdmittedPriority)
	time.Sleep(10 * time.Millisecond) // the shortened delay

	for _, want := range []struct {
		name     string
		priority int
	}{{"admitted", AdmittedPriority}, {w.key.Name, 0}} {
		got, p, _ := q.GetWithPriority()
		if got.Name != want.name || p != want.priority {
			t.Errorf("got %s at priority %d, want %s at %d", got.Name, p, want.name, want.priority)
		}
		q.Done(got)
	}
}

// A session first seen in the initial list (or a resync) is handed out at
// -100; its look-again (a blocked session's retry here, a drain deadline
// or cull timer elsewhere) is an ordinary event, not one that waits behind
// every event of a busy fleet.
func TestInitialListSessionLooksAgainAtTheDefaultPriority(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, nil)
	deleteTemplate(t, w) // blocked: TemplateNotFound, retried with backoff
	result, err := w.r.Reconcile(context.Background(), reconcile.Request{NamespacedName: w.key})
	if err != nil || result.RequeueAfter <= 0 {
		t.Fatalf("precondition: a blocked session is retried later; result %+v, err %v", result, err)
	}
	if result.Priority == nil || *result.Priority != 0 {
		t.Errorf("result priority %v, want 0 (nil keeps the initial list's -100)", result.Priority)
	}
}

// A step that did not complete keeps its priority: a session whose status
// write met a newer version of it computes its step again at the priority
// it was handed out with (an admitted session's drain request, here).
func TestRefusedStatusWriteRetriesAtItsPriority(t *testing.T) {
	conflict := interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
		return apierrors.NewConflict(schema.GroupResource{Group: lullv1.GroupVersion.Group, Resource: "sessions"}, o.GetName(), nil)
	}}
	w := newWorld(t, conflict, nil) // admitted to the wave: its reconcile requests a drain
	result, err := w.r.Reconcile(context.Background(), reconcile.Request{NamespacedName: w.key})
	if err != nil || result.RequeueAfter <= 0 {
		t.Fatalf("precondition: the refused write is retried soon; result %+v, err %v", result, err)
	}
	if result.Priority != nil {
		t.Errorf("result priority %d, want none (the item's own, AdmittedPriority)", *result.Priority)
	}
}

// A runtime earns DrainedPriority once per drain request. A runtime that
// flips its report between Draining and Drained for the same request (a
// protocol violation: Drained seals it until the request is withdrawn)
// would otherwise send its session ahead of every other session on each
// flip, and a handful of such runtimes would keep every worker of the
// controller for themselves. A later flip queues as any other event:
// behind a session queued before it.
func TestDrainedPriorityOncePerRequest(t *testing.T) {
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	h := &sessionEvents{}
	ctx := context.Background()
	flip := func(rv string, from, to lullv1.RuntimeState) {
		old, cur := draining(rv, from), draining(rv+"0", to)
		h.Update(ctx, event.UpdateEvent{ObjectOld: old, ObjectNew: cur}, q)
	}
	flip("1", lullv1.RuntimeDraining, lullv1.RuntimeDrained)
	if item, p, _ := q.GetWithPriority(); item.Name != "s" || p != DrainedPriority {
		t.Fatalf("first Drained report: %s at %d, want s at DrainedPriority", item.Name, p)
	} else {
		q.Done(item)
	}
	flip("2", lullv1.RuntimeDrained, lullv1.RuntimeDraining)
	if item, _, _ := q.GetWithPriority(); item.Name != "s" {
		t.Fatalf("got %s, want s", item.Name)
	} else {
		q.Done(item)
	}
	q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "other"}})
	flip("3", lullv1.RuntimeDraining, lullv1.RuntimeDrained) // the same request, Drained again
	for _, want := range []string{"other", "s"} {
		item, p, _ := q.GetWithPriority()
		if item.Name != want {
			t.Errorf("got %s at priority %d, want %s: the flipped report jumps the queue again", item.Name, p, want)
		}
		q.Done(item)
	}
	// The session's next request earns the priority again.
	old, cur := draining("4", lullv1.RuntimeDraining), draining("5", lullv1.RuntimeDrained)
	cur.Status.Drain.RequestID, cur.Status.Runtime.RequestID = "update-00000000000000a2", "update-00000000000000a2"
	old.Status.Drain.RequestID = "update-00000000000000a2"
	h.Update(ctx, event.UpdateEvent{ObjectOld: old, ObjectNew: cur}, q)
	if item, p, _ := q.GetWithPriority(); p != DrainedPriority {
		t.Errorf("the next request's Drained report: %s at %d, want DrainedPriority", item.Name, p)
	}
}
