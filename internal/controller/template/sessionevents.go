package template

import (
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// sessionCounted passes the Session updates that can change its template's
// status, and drops the runtime's reports that cannot: during a rollout
// every runtime reports Draining, then Drained, and rewrites its report
// periodically, and each of those would otherwise recount the whole
// template (a list of all its sessions) for nothing.
//
// What the template reads of a Session: its spec (suspend, templateRef),
// deletionTimestamp, the controller's status (revisions, drain, drain
// sequence, replacement, conditions, lifecycle, pod UID), and of
// status.runtime only whether the current pod's runtime reports no turn in
// flight (PlanWave admits idle sessions first). Creations and deletions
// always pass.
var sessionCounted = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	old, okOld := e.ObjectOld.(*lullv1.Session)
	cur, okNew := e.ObjectNew.(*lullv1.Session)
	return !okOld || !okNew || TemplateInputsChanged(old, cur)
}}

// TemplateInputsChanged reports whether the update of a session from old
// to cur changes anything its template's status is computed from (see
// sessionCounted). An update whose resourceVersion did not move (a resync)
// counts as a change, as it did before the filter.
func TemplateInputsChanged(old, cur *lullv1.Session) bool {
	if old.ResourceVersion == cur.ResourceVersion {
		return true
	}
	return !equality.Semantic.DeepEqual(templateView(old), templateView(cur))
}

// templateView is what the template reads of s: s with its metadata's
// bookkeeping and its runtime report reduced to the runtime's idleness.
func templateView(s *lullv1.Session) *lullv1.Session {
	v := s.DeepCopy()
	v.ResourceVersion, v.ManagedFields = "", nil
	if r := v.Status.Runtime; r != nil {
		v.Status.Runtime = &lullv1.RuntimeReport{PodUID: r.PodUID, ActiveTurns: min(r.ActiveTurns, 1)}
	}
	return v
}
