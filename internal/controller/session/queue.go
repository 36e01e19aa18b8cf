package session

import (
	"context"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
)

// DrainedPriority is the work-queue priority of a session whose runtime has
// just answered its drain request Drained. controller-runtime's priority
// queue hands out higher priorities first (events default to 0, the initial
// list and resyncs to handler.LowPriority, -100): a runtime that drained is
// sealed and waits for its pod to be deleted, so its reconcile goes ahead
// of status churn and of sessions still being asked to drain.
const DrainedPriority = 100

// AdmittedPriority is the work-queue priority of a session the template
// has just admitted to its rollout wave: its reconcile asks its runtime to
// drain, and a template update enqueues every session of the template at
// the default priority to be rendered again (thousands, in a fleet), which
// the wave must not wait behind. Below DrainedPriority: a runtime already
// drained waits with its turns refused.
const AdmittedPriority = 50

// sessionEvents enqueues the Session an event is about, as
// handler.EnqueueRequestForObject does (with its priorities: low for the
// initial list and for resyncs), except that an update carrying a newly
// matching Drained report (NewlyDrained) is added with DrainedPriority,
// once per drain request.
type sessionEvents struct {
	handler.EnqueueRequestForObject

	mu sync.Mutex
	// prioritized holds, by session, the drain request whose Drained
	// report was last given DrainedPriority. A runtime that flips its
	// report between Draining and Drained for one request (a protocol
	// violation: Drained seals it) would otherwise send its session ahead
	// of every other on each flip, and a few such runtimes would hold
	// every worker. One entry per session that drained; dropped with the
	// Session.
	prioritized map[types.NamespacedName]string
}

// Update implements handler.EventHandler.
func (h *sessionEvents) Update(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	old, okOld := e.ObjectOld.(*lullv1.Session)
	cur, okNew := e.ObjectNew.(*lullv1.Session)
	if !okOld || !okNew || !NewlyDrained(old, cur) || !h.firstDrained(cur) {
		h.EnqueueRequestForObject.Update(ctx, e, q)
		return
	}
	addWithPriority(q, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: cur.Namespace, Name: cur.Name}}, DrainedPriority)
}

// firstDrained records that s's drain request is given DrainedPriority,
// and reports whether it had not been yet.
func (h *sessionEvents) firstDrained(s *lullv1.Session) bool {
	key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.prioritized[key] == s.Status.Drain.RequestID {
		return false
	}
	if h.prioritized == nil {
		h.prioritized = map[types.NamespacedName]string{}
	}
	h.prioritized[key] = s.Status.Drain.RequestID
	return true
}

// Delete implements handler.EventHandler.
func (h *sessionEvents) Delete(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if e.Object != nil {
		h.mu.Lock()
		delete(h.prioritized, types.NamespacedName{Namespace: e.Object.GetNamespace(), Name: e.Object.GetName()})
		h.mu.Unlock()
	}
	h.EnqueueRequestForObject.Delete(ctx, e, q)
}

// addWithPriority adds req to q with priority p when q is a priority
// queue, and as any other item otherwise.
func addWithPriority(q workqueue.TypedRateLimitingInterface[reconcile.Request], req reconcile.Request, p int) {
	if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
		pq.AddWithOpts(priorityqueue.AddOpts{Priority: &p}, req)
		return
	}
	q.Add(req)
}

// NewlyDrained reports whether cur's runtime report answers cur's drain
// request Drained (the request ID and pod UID match, as drain.Answers
// judges for the decision) while old's report did not answer that request: the moment the runtime of a
// session became safe to replace.
func NewlyDrained(old, cur *lullv1.Session) bool {
	d := cur.Status.Drain
	if d == nil || !drain.Answers(d, cur.Status.Runtime, d.PodUID) {
		return false
	}
	return !drain.Answers(d, old.Status.Runtime, d.PodUID)
}

// decisionInputsChanged passes the Session updates that can change what the
// Session reconciler decides or writes, and drops the rest: an update that
// moved only the resourceVersion and managed fields, not the time of the
// runtime's write of status.runtime (ReportWrittenAt).
//
// A write that moves only status.runtime.reportedAt passes: it is a
// runtime's start re-asserting its report (the SDK and lull agent write a
// report only when it changed, and write it on every start), and its
// write time is what tells a live restarted runtime from the run that
// crashed (rollout.PodFailure) and what renews the start record
// (rollout.RecordStart), which must be written at once while the kubelet
// still shows the back-off. Dropping it as a rewrite left that evidence in
// status.runtime alone, where the next write to status.runtime erases it.
// It costs a reconcile per runtime start (and per retry of a write whose
// success the runtime did not see), a status write only when the record
// must be renewed: once per restart whose report beats the kubelet. An
// older runtime that rewrites its report periodically costs a reconcile
// per rewrite, without a status write.
//
// Updates whose resourceVersion did not move (resyncs) pass, as before.
var decisionInputsChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	old, okOld := e.ObjectOld.(*lullv1.Session)
	cur, okNew := e.ObjectNew.(*lullv1.Session)
	if !okOld || !okNew {
		return true
	}
	return !DecisionInputsSame(old, cur)
}}

// DecisionInputsSame reports whether the update from old to cur moved
// nothing the reconciler reads (see decisionInputsChanged): the whole
// Session but its resourceVersion and managed fields, and of the managed
// fields the time of the runtime's write. Same resourceVersion is not such
// an update (a resync).
func DecisionInputsSame(old, cur *lullv1.Session) bool {
	if old.ResourceVersion == cur.ResourceVersion || !ReportWrittenAt(old).Equal(ReportWrittenAt(cur)) {
		return false
	}
	return equality.Semantic.DeepEqual(decisionView(old), decisionView(cur))
}

// decisionView is s without what decisionInputsChanged ignores.
func decisionView(s *lullv1.Session) *lullv1.Session {
	v := s.DeepCopy()
	v.ResourceVersion = ""
	v.ManagedFields = nil
	return v
}

// statefulSetInputsChanged passes the StatefulSet updates that can change
// what the Session reconciler decides or writes, and drops the StatefulSet
// controller's status writes that only move its replica counters (ready,
// available, current, updated replicas), several per replaced pod: the
// session's pod events carry the same news.
//
// What the reconciler reads of its StatefulSet: metadata (labels,
// annotations, owner references, generation), the spec (compared with what
// it renders), status.observedGeneration and status.updateRevision (is the
// revision published; which one). status.currentRevision, not read, is
// compared too: it moves once per rollout.
var statefulSetInputsChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	old, okOld := e.ObjectOld.(*appsv1.StatefulSet)
	cur, okNew := e.ObjectNew.(*appsv1.StatefulSet)
	return !okOld || !okNew || !ReplicaCountsOnly(old, cur)
}}

// ReplicaCountsOnly reports whether the update of a StatefulSet from old to
// cur moved only what the Session reconciler does not read (see
// statefulSetInputsChanged). An update whose resourceVersion did not move
// (a resync) is not one.
func ReplicaCountsOnly(old, cur *appsv1.StatefulSet) bool {
	if old.ResourceVersion == cur.ResourceVersion {
		return false
	}
	view := func(s *appsv1.StatefulSet) *appsv1.StatefulSet {
		v := s.DeepCopy()
		v.ResourceVersion, v.ManagedFields = "", nil
		v.Status = appsv1.StatefulSetStatus{ObservedGeneration: s.Status.ObservedGeneration,
			UpdateRevision: s.Status.UpdateRevision, CurrentRevision: s.Status.CurrentRevision}
		return v
	}
	return equality.Semantic.DeepEqual(view(old), view(cur))
}
