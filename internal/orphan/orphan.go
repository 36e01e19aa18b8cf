// Package orphan judges which objects labelled for a session name belong to
// no live Session: those a Session deleted with --cascade=orphan left
// behind, those whose owner references were stripped, and a predecessor's
// when a Session is recreated under the same name with a new UID. It is a
// pure function of what the controller observed; the session reconciler
// reads the objects, asks Judge, confirms against the API server and acts.
//
// The rules, in the order Judge applies them:
//
//   - Only objects labelled lull.dev/session=<name> and bearing the name
//     lull gives their kind are ever judged (the caller lists nothing
//     else; see lullNamed), and an object whose controller is of a
//     kind lull never sets (for a ServiceAccount, Role, RoleBinding, Service
//     or StatefulSet anything but a Session; for a pod or claim anything but
//     a StatefulSet, or a pod for a claim) is someone else's: left alone.
//   - The session's own: controlled by the Session's UID; a pod or claim
//     controlled by a StatefulSet the Session controls.
//   - The session's own that lost its owner reference (no controller, and
//     the label lull.dev/session-uid names the Session's UID, or it has no
//     such label, made by a lull that predates it, and was created no
//     earlier than the Session): the owner reference is restored
//     (RestoreOwner), never reaped: reaping a live session's StatefulSet
//     would kill its pod without a drain.
//   - A pod without a controller whose UID is the session's status.podUID,
//     or created after the Session (a predecessor's pod never is: its
//     StatefulSet made it before the new Session existed), or in the
//     Session's second while the session has its own StatefulSet
//     (timestamps have a one-second resolution), is the session's own pod
//     whose StatefulSet was deleted with --cascade=orphan or whose owner
//     reference was stripped: its StatefulSet adopts it again.
//   - A claim without a controller was retained (WhenDeleted=Retain: the
//     StatefulSet controller sets an owner reference on a claim only for
//     Delete): kept, and when it is older than the Session, reported as a
//     predecessor's claim the session reuses (ReuseClaim).
//   - With a Session of that name: everything else labelled with the name is
//     a predecessor's and is reaped (Reap), or waited for while it is
//     already being deleted (Terminating).
//   - With no Session of that name: objects without a controller are
//     reaped, and so are the pods and claims of a StatefulSet being reaped;
//     an object whose controller is a Session or StatefulSet that is gone
//     is left to the garbage collector, which deletes it (that is an
//     ordinary cascading delete, not an orphan).
package orphan

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Fate is what becomes of an object Judge returns.
type Fate string

const (
	// Reap: a predecessor's object, to be deleted (UID precondition,
	// background propagation).
	Reap Fate = "Reap"
	// Terminating: a predecessor's object already being deleted; nothing
	// to do but wait for it to go.
	Terminating Fate = "Terminating"
	// RestoreOwner: the session's own object that lost its owner reference;
	// the Session is set as its controller again.
	RestoreOwner Fate = "RestoreOwner"
	// ReuseClaim: a claim a predecessor retained (WhenDeleted=Retain) that
	// the session's StatefulSet will mount again, as Retain means.
	ReuseClaim Fate = "ReuseClaim"
)

// Observed is what the controller saw for one session name in one
// namespace.
type Observed struct {
	// Session is the Session of that name, or nil when none exists.
	Session *lullv1.Session
	// Objects are the objects labelled lull.dev/session=<name>: pointers to
	// ServiceAccounts, Roles, RoleBindings, Services, StatefulSets, Pods
	// and PersistentVolumeClaims. Other types are ignored.
	Objects []client.Object
}

// Finding is one object Judge found to be not simply the session's own.
type Finding struct {
	Object client.Object
	// Kind is the object's kind (ServiceAccount, StatefulSet, Pod, …).
	Kind string
	Fate Fate
	// Predecessor is the UID of the Session the object belonged to, when
	// its owner reference or its lull.dev/session-uid label (or its
	// StatefulSet's) says; empty when nothing does.
	Predecessor types.UID
}

// Orphaned reports whether f is a predecessor's object still present:
// to be reaped or being deleted.
func (f Finding) Orphaned() bool { return f.Fate == Reap || f.Fate == Terminating }

// Judge returns the findings about o.Objects, in the order given except
// that StatefulSets come last (see the package doc for the rules): a pod or
// claim is judged by its StatefulSet, so it is acted on while that is still
// there to be read. Objects that are simply the session's own, or someone
// else's, are not in it.
func Judge(o Observed) []Finding {
	s := o.Session
	// First the StatefulSets: a pod's or claim's verdict follows its
	// controller's.
	own := map[types.UID]bool{}       // StatefulSets of the session
	orphaned := map[types.UID]bool{}  // StatefulSets being reaped
	pred := map[types.UID]types.UID{} // StatefulSet UID → its session's UID
	var out, sets []Finding
	for _, obj := range o.Objects {
		sts, ok := obj.(*appsv1.StatefulSet)
		if !ok || !lullNamed(s, obj) {
			continue
		}
		pred[sts.UID] = predecessorOf(sts)
		f, ok := judgeOwned(s, sts, "StatefulSet")
		switch {
		case !ok:
			if isFromSession(s, sts) {
				own[sts.UID] = true
			}
			continue
		case f.Fate == RestoreOwner:
			own[sts.UID] = true
		default:
			orphaned[sts.UID] = true
		}
		sets = append(sets, f)
	}
	for _, obj := range o.Objects {
		var f Finding
		var ok bool
		if !lullNamed(s, obj) {
			continue
		}
		switch v := obj.(type) {
		case *corev1.ServiceAccount:
			f, ok = judgeOwned(s, v, "ServiceAccount")
		case *corev1.Service:
			f, ok = judgeOwned(s, v, "Service")
		case *rbacv1.Role:
			f, ok = judgeOwned(s, v, "Role")
		case *rbacv1.RoleBinding:
			f, ok = judgeOwned(s, v, "RoleBinding")
		case *corev1.Pod:
			f, ok = judgePod(s, v, own, orphaned, pred)
		case *corev1.PersistentVolumeClaim:
			f, ok = judgeClaim(s, v, own, orphaned, pred)
		}
		if ok {
			out = append(out, f)
		}
	}
	return append(out, sets...)
}

// lullNamed reports whether obj bears the name lull gives that kind of
// object for session s (or, with none, for the session it is labelled
// for; a StatefulSet read for its pod may have lost that label):
// lull-runtime-<name> for the
// ServiceAccount, Role and RoleBinding, <name> for the Service and the
// StatefulSet, <name>-<ordinal> for a pod (the StatefulSet controller's
// names; it adopts no other). A user's own object that merely carries the
// label (an extra Service labelled like its selector, a debug pod copied
// from the session's) is not lull's to reap. Claims are judged by their
// controller, not their name (see judgeClaim).
func lullNamed(s *lullv1.Session, obj client.Object) bool {
	session, name := obj.GetLabels()[lullv1.LabelSession], obj.GetName()
	if s != nil {
		session = s.Name
	}
	switch obj.(type) {
	case *corev1.ServiceAccount, *rbacv1.Role, *rbacv1.RoleBinding:
		return name == lullv1.RuntimeIdentityName(session)
	case *corev1.Service, *appsv1.StatefulSet:
		return name == session
	case *corev1.Pod:
		ordinal, ok := strings.CutPrefix(name, session+"-")
		if !ok || ordinal == "" {
			return false
		}
		for _, c := range ordinal {
			if c < '0' || c > '9' {
				return false
			}
		}
		return true
	}
	return true
}

// createdWithOrAfter reports whether obj was created no earlier than s.
// Creation timestamps have a resolution of one second, and a session's
// first objects are routinely created in the second its Session was:
// "strictly after" would take them for a predecessor's.
func createdWithOrAfter(obj client.Object, s *lullv1.Session) bool {
	c := obj.GetCreationTimestamp()
	return !c.Before(&s.CreationTimestamp)
}

// isFromSession reports whether obj is controlled by s.
func isFromSession(s *lullv1.Session, obj client.Object) bool {
	ref := metav1.GetControllerOf(obj)
	return s != nil && ref != nil && ref.Kind == "Session" && ref.UID == s.UID
}

// predecessorOf is the UID of the Session obj belonged to: its controller's,
// or its lull.dev/session-uid label's.
func predecessorOf(obj client.Object) types.UID {
	if ref := metav1.GetControllerOf(obj); ref != nil && ref.Kind == "Session" {
		return ref.UID
	}
	return types.UID(obj.GetLabels()[lullv1.LabelSessionUID])
}

// judgeOwned judges an object lull creates with the Session as controller
// (ServiceAccount, Role, RoleBinding, Service, StatefulSet).
func judgeOwned(s *lullv1.Session, obj client.Object, kind string) (Finding, bool) {
	f := Finding{Object: obj, Kind: kind, Predecessor: predecessorOf(obj)}
	ref := metav1.GetControllerOf(obj)
	switch {
	case ref != nil && ref.Kind != "Session":
		return f, false // someone else's
	case ref == nil && s != nil && obj.GetLabels()[lullv1.LabelSessionUID] == string(s.UID):
		f.Fate = RestoreOwner
		return f, true
	case ref == nil && s != nil && obj.GetLabels()[lullv1.LabelSessionUID] == "" && createdWithOrAfter(obj, s):
		// Made by a lull that predates lull.dev/session-uid (an upgrade),
		// for this session: a predecessor's was created before it.
		// Reaping a live session's StatefulSet would delete its pod
		// without a drain.
		f.Fate = RestoreOwner
		return f, true
	case ref != nil && s != nil && ref.UID == s.UID:
		return f, false // the session's own
	case ref != nil && s == nil:
		return f, false // its Session is gone: the garbage collector deletes it
	}
	return reap(f), true
}

// judgePod judges a pod labelled with the session name: the session's own
// only when its controller is the session's StatefulSet, or when it has
// none and is the pod the session's status names.
func judgePod(s *lullv1.Session, pod *corev1.Pod, own, orphaned map[types.UID]bool, pred map[types.UID]types.UID) (Finding, bool) {
	f := Finding{Object: pod, Kind: "Pod"}
	ref := metav1.GetControllerOf(pod)
	switch {
	case ref == nil && s != nil && ownedPodWithoutController(s, pod, own):
		return f, false // the session's own pod; its StatefulSet adopts it again
	case ref == nil:
		return reap(f), true // a StatefulSet of that name would adopt it
	case ref.Kind != "StatefulSet":
		return f, false // someone else's
	}
	f.Predecessor = pred[ref.UID]
	switch {
	case own[ref.UID]:
		return f, false
	case orphaned[ref.UID] || s != nil:
		return reap(f), true
	}
	return f, false // its StatefulSet is gone or being collected: the garbage collector deletes it
}

// ownedPodWithoutController reports whether a pod labelled for s that has
// no controller is s's own (its StatefulSet deleted with --cascade=orphan,
// or its owner reference stripped): the pod s's status names, or one
// created after s. Creation timestamps have a resolution of one second,
// and a session's first pod is routinely created in the second its Session
// was, as a predecessor's pod can be when a script deletes a Session and
// creates it again at once. In that second the pod is s's own only while s
// has its own StatefulSet: a recreated session gets one only once every
// pod of its predecessor is gone, so a pod there with it is its own (its
// owner reference stripped), and reaping it would kill a live runtime
// without a drain.
func ownedPodWithoutController(s *lullv1.Session, pod *corev1.Pod, own map[types.UID]bool) bool {
	if pod.UID != "" && pod.UID == s.Status.PodUID {
		return true
	}
	c := pod.CreationTimestamp
	return c.After(s.CreationTimestamp.Time) || c.Equal(&s.CreationTimestamp) && len(own) > 0
}

// judgeClaim judges a claim labelled with the session name (the StatefulSet
// controller copies its selector's labels onto the claims it makes). Its
// owner reference says the predecessor's retention policy: with
// WhenDeleted=Delete the StatefulSet controller makes the StatefulSet the
// claim's controller, with Retain it sets none.
func judgeClaim(s *lullv1.Session, pvc *corev1.PersistentVolumeClaim, own, orphaned map[types.UID]bool, pred map[types.UID]types.UID) (Finding, bool) {
	f := Finding{Object: pvc, Kind: "PersistentVolumeClaim"}
	ref := metav1.GetControllerOf(pvc)
	switch {
	case ref == nil:
		if s != nil && pvc.CreationTimestamp.Before(&s.CreationTimestamp) {
			f.Fate = ReuseClaim
			return f, true
		}
		return f, false // retained: kept, as Retain means
	case ref.Kind != "StatefulSet":
		return f, false // a scaled-down pod's (WhenScaled=Delete), or someone else's
	}
	f.Predecessor = pred[ref.UID]
	switch {
	case own[ref.UID]:
		return f, false
	case orphaned[ref.UID] || s != nil:
		return reap(f), true
	}
	return f, false
}

// reap gives f the fate of a predecessor's object: reaped, or waited for
// while already being deleted.
func reap(f Finding) Finding {
	f.Fate = Reap
	if f.Object.GetDeletionTimestamp() != nil {
		f.Fate = Terminating
	}
	return f
}
