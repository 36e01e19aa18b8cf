package session

import (
	"context"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
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
// Session reconciler decides or writes, and drops the rest: a runtime's
// report rewritten with nothing new in it (only status.runtime.reportedAt,
// and with it the resourceVersion and the time of the runtime's
// managed-fields entry, moved).
//
// What the reconciler reads of a Session, and why a refresh changes none
// of it:
//   - metadata: name, namespace, UID, generation, resourceVersion (the
//     precondition of its writes, always taken from the cache at the
//     reconcile, so never from the event), deletionTimestamp, labels and
//     annotations (force-update and its reason, keep-alive,
//     idle-suspended), the managed-fields entry owning the force-update
//     annotation (for an Event's text): compared, except resourceVersion
//     and managedFields;
//   - spec (templateRef, suspend, env, labels): compared;
//   - the controller's own status (drain, replacement, drain sequence,
//     revisions, lifecycle, conditions, failure bookkeeping): compared, so
//     every status write of the controller still passes (the next step
//     reads it: a commitment scales a suspended pod away, for one);
//   - status.runtime: podUID, requestID, state, activeTurns, lastActivity,
//     expiredTurns, refreshSeconds: compared; reportedAt: ignored. The
//     lifecycle reads reportedAt only with the time of the runtime's
//     managed-fields entry (ReportWrittenAt), to shift lastActivity onto
//     the API server's clock; a rewrite with the same lastActivity moves
//     that shifted time only by the change of clock skew between the two
//     writes. A report is never judged by its age (runtimes write only
//     what changed; docs/protocol.md). A rewrite while the controller's
//     Active condition says RuntimeNotReporting passes all the same.
//
// The filter does not rely on a runtime rewriting its report periodically:
// it drops only rewrites, and passes every change. Updates whose
// resourceVersion did not move (resyncs) pass, as before.
var decisionInputsChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	old, okOld := e.ObjectOld.(*lullv1.Session)
	cur, okNew := e.ObjectNew.(*lullv1.Session)
	if !okOld || !okNew {
		return true
	}
	return !ReportRewriteOnly(old, cur)
}}

// ReportRewriteOnly reports whether the update from old to cur is a runtime
// rewriting its report with nothing the reconciler decides on changed (see
// decisionInputsChanged): same resourceVersion is not one (a resync), nor is
// a rewrite of a report the controller judged stale.
func ReportRewriteOnly(old, cur *lullv1.Session) bool {
	if old.ResourceVersion == cur.ResourceVersion || old.Status.Runtime == nil || cur.Status.Runtime == nil {
		return false
	}
	if c := meta.FindStatusCondition(old.Status.Conditions, lullv1.ConditionActive); c != nil && c.Reason == lullv1.ReasonRuntimeNotReporting {
		return false
	}
	return equality.Semantic.DeepEqual(decisionView(old), decisionView(cur))
}

// decisionView is s without what decisionInputsChanged ignores.
func decisionView(s *lullv1.Session) *lullv1.Session {
	v := s.DeepCopy()
	v.ResourceVersion = ""
	v.ManagedFields = nil
	v.Status.Runtime.ReportedAt = nil
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
