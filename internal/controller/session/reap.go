package session

import (
	"context"
	"fmt"
	"strings"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/index"
	"lull.dev/lull/internal/orphan"
)

// sessionKinds are the kinds labelled lull.dev/session that the reaper
// judges, as the lists it reads them with.
func sessionKinds() []client.ObjectList {
	return []client.ObjectList{
		&corev1.ServiceAccountList{}, &rbacv1.RoleList{}, &rbacv1.RoleBindingList{}, &corev1.ServiceList{},
		&appsv1.StatefulSetList{}, &corev1.PodList{}, &corev1.PersistentVolumeClaimList{},
	}
}

// labelled returns the cached objects labelled lull.dev/session=<key.Name>
// in key.Namespace.
func (r *Reconciler) labelled(ctx context.Context, key types.NamespacedName) ([]client.Object, error) {
	var out []client.Object
	for _, list := range sessionKinds() {
		if err := r.Client.List(ctx, list, client.InNamespace(key.Namespace), client.MatchingFields{index.SessionLabel: key.Name}); err != nil {
			return nil, err
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return nil, err
		}
		for _, o := range items {
			out = append(out, o.(client.Object))
		}
	}
	return out, nil
}

// reaped is what reapOrphans found and did.
type reaped struct {
	// left are the predecessor's objects still present (deleted now or
	// earlier, or refused to be deleted), confirmed against the API server.
	left []orphan.Finding
	// ownStatefulSet: the session's own StatefulSet exists.
	ownStatefulSet bool
}

// reapOrphans judges the objects labelled with key's name against s (nil:
// no Session of that name exists; see package orphan) and acts on each
// finding after confirming it against the API server, since the cache may
// lag: a predecessor's object is deleted with its UID as precondition and
// background propagation (the garbage collector then removes what it
// owned), a live session's object that lost its owner reference gets it
// back, a reused retained claim is reported once. Each step is recorded as
// an Event: on the Session when one exists, else on the object.
func (r *Reconciler) reapOrphans(ctx context.Context, key types.NamespacedName, s *lullv1.Session) (reaped, error) {
	objs, err := r.labelled(ctx, key)
	if err != nil {
		return reaped{}, err
	}
	var out reaped
	for _, o := range objs {
		if sts, ok := o.(*appsv1.StatefulSet); ok && s != nil && metav1.IsControlledBy(sts, s) {
			out.ownStatefulSet = true
		}
	}
	var findings []orphan.Finding
	for _, f := range orphan.Judge(orphan.Observed{Session: s, Objects: objs}) {
		if f.Fate == orphan.ReuseClaim {
			// Reported once, without reading the Session from the API
			// server: a reused claim stays one for the session's whole
			// life, and a live read on each of its reconciles would cost
			// one uncached GET per event.
			r.announceReuse(key, s, f)
			continue
		}
		findings = append(findings, f)
	}
	if len(findings) == 0 {
		return out, nil
	}
	// The Session as the API server has it: one created or deleted since
	// the cache was filled changes every verdict.
	cur := &lullv1.Session{}
	if err := r.reader().Get(ctx, key, cur); apierrors.IsNotFound(err) {
		cur = nil
	} else if err != nil {
		return reaped{}, err
	}
	for _, f := range findings {
		f, ok, err := r.confirm(ctx, cur, f)
		if err != nil {
			return reaped{}, err
		}
		if !ok {
			continue
		}
		switch f.Fate {
		case orphan.RestoreOwner:
			if err := r.restoreOwner(ctx, cur, f); err != nil {
				return reaped{}, err
			}
			if f.Kind == "StatefulSet" {
				out.ownStatefulSet = true
			}
		case orphan.Reap:
			if err := r.reap(ctx, cur, f); err != nil {
				return reaped{}, err
			}
			out.left = append(out.left, f)
		case orphan.Terminating:
			out.left = append(out.left, f)
		}
	}
	return out, nil
}

// confirm judges f's object again from the API server: the object as it is
// now (gone, or another of its name: nothing to do), the StatefulSet that
// controls it (for a pod or claim), and cur. An object whose controller is
// a Session of another name that exists is never a predecessor's.
func (r *Reconciler) confirm(ctx context.Context, cur *lullv1.Session, f orphan.Finding) (orphan.Finding, bool, error) {
	obj := f.Object.DeepCopyObject().(client.Object)
	if err := r.reader().Get(ctx, client.ObjectKeyFromObject(obj), obj); apierrors.IsNotFound(err) {
		return f, false, nil
	} else if err != nil {
		return f, false, err
	}
	if obj.GetUID() != f.Object.GetUID() {
		return f, false, nil
	}
	objs := []client.Object{obj}
	if _, isPod := obj.(*corev1.Pod); isPod && cur != nil && metav1.GetControllerOf(obj) == nil {
		// A pod without a controller created in the Session's second is
		// its own only while the session has its own StatefulSet (see
		// orphan.Judge): read that too, since the cache may not have it.
		sts := &appsv1.StatefulSet{}
		err := r.reader().Get(ctx, types.NamespacedName{Namespace: obj.GetNamespace(), Name: cur.Name}, sts)
		if err != nil && !apierrors.IsNotFound(err) {
			return f, false, err
		}
		if err == nil {
			objs = append(objs, sts)
		}
	}
	if ref := metav1.GetControllerOf(obj); ref != nil {
		switch {
		case ref.Kind == "StatefulSet":
			sts := &appsv1.StatefulSet{}
			err := r.reader().Get(ctx, types.NamespacedName{Namespace: obj.GetNamespace(), Name: ref.Name}, sts)
			if err != nil && !apierrors.IsNotFound(err) {
				return f, false, err
			}
			if err == nil {
				objs = append(objs, sts)
			}
		case ref.Kind == "Session" && ref.Name != obj.GetLabels()[lullv1.LabelSession]:
			owner := &lullv1.Session{}
			err := r.reader().Get(ctx, types.NamespacedName{Namespace: obj.GetNamespace(), Name: ref.Name}, owner)
			if err == nil && owner.UID == ref.UID {
				return f, false, nil
			}
			if err != nil && !apierrors.IsNotFound(err) {
				return f, false, err
			}
		}
	}
	for _, again := range orphan.Judge(orphan.Observed{Session: cur, Objects: objs}) {
		if again.Object.GetUID() == obj.GetUID() {
			return again, again.Fate == f.Fate || again.Orphaned() && f.Orphaned(), nil
		}
	}
	return f, false, nil
}

// reap deletes a predecessor's object: exactly the one judged (UID
// precondition), with background propagation so the garbage collector
// removes what it owns (a StatefulSet's pod and claims). A 404 or 409 means
// it went, or another of its name is there: nothing was reaped.
func (r *Reconciler) reap(ctx context.Context, cur *lullv1.Session, f orphan.Finding) error {
	uid := f.Object.GetUID()
	err := r.Client.Delete(ctx, f.Object, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return nil
	case err != nil:
		return fmt.Errorf("delete %s %s: %w", f.Kind, f.Object.GetName(), err)
	}
	orphansReaped.WithLabelValues(f.Kind).Inc()
	log.FromContext(ctx).Info("reaped orphan", "kind", f.Kind, "name", f.Object.GetName(), "uid", uid, "predecessor", f.Predecessor)
	msg := fmt.Sprintf("deleted %s %s, left by %s", f.Kind, f.Object.GetName(), predecessor(f))
	if cur != nil {
		r.Recorder.Eventf(cur, f.Object, corev1.EventTypeNormal, lullv1.ReasonOrphanReaped, "Reap", msg+"; the session starts once its predecessor's objects are gone")
	} else {
		r.Recorder.Eventf(f.Object, nil, corev1.EventTypeNormal, lullv1.ReasonOrphanReaped, "Reap", msg+" (no Session of that name exists)")
	}
	return nil
}

// restoreOwner sets cur as the controller of its own object again, with the
// object's resourceVersion as precondition (a Conflict is retried by the
// workqueue).
func (r *Reconciler) restoreOwner(ctx context.Context, cur *lullv1.Session, f orphan.Finding) error {
	obj := f.Object
	patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	if err := controllerutil.SetControllerReference(cur, obj, r.Client.Scheme()); err != nil {
		return err
	}
	if err := r.Client.Patch(ctx, obj, patch, client.FieldOwner(lullv1.FieldManagerController)); err != nil {
		return fmt.Errorf("restore the owner reference of %s %s: %w", f.Kind, obj.GetName(), err)
	}
	log.FromContext(ctx).Info("restored owner reference", "kind", f.Kind, "name", obj.GetName())
	r.Recorder.Eventf(cur, obj, corev1.EventTypeNormal, lullv1.ReasonOwnerReferenceRestored, "Reap",
		"%s %s had lost its owner reference to this session (its %s label names this session's UID); it is restored", f.Kind, obj.GetName(), lullv1.LabelSessionUID)
	return nil
}

// reuseAnnouncements remembers, per session name, the retained claims
// whose reuse was reported to the Session of that UID, so the Event is
// recorded once per claim and session in this process. A name's entry is
// dropped when its Session is gone (forget) and replaced when a Session of
// another UID takes the name, so it holds no more than the live sessions
// that reuse claims. The zero value is ready to use.
type reuseAnnouncements struct {
	mu sync.Mutex
	m  map[types.NamespacedName]reuseAnnounced
}

type reuseAnnounced struct {
	session types.UID
	claims  map[types.UID]bool
}

// first reports whether the reuse of claim by session (UID uid) was not
// announced yet, and records it.
func (a *reuseAnnouncements) first(key types.NamespacedName, uid, claim types.UID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[types.NamespacedName]reuseAnnounced{}
	}
	e, ok := a.m[key]
	if !ok || e.session != uid {
		e = reuseAnnounced{session: uid, claims: map[types.UID]bool{}}
		a.m[key] = e
	}
	if e.claims[claim] {
		return false
	}
	e.claims[claim] = true
	return true
}

// forget drops what was announced to the Session of that name.
func (a *reuseAnnouncements) forget(key types.NamespacedName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.m, key)
}

func (a *reuseAnnouncements) len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.m)
}

// announceReuse records, once, that s mounts a claim its predecessor
// retained.
func (r *Reconciler) announceReuse(key types.NamespacedName, s *lullv1.Session, f orphan.Finding) {
	if s == nil || !r.reused.first(key, s.UID, f.Object.GetUID()) {
		return
	}
	r.Recorder.Eventf(s, f.Object, corev1.EventTypeNormal, lullv1.ReasonPredecessorClaimReused, "Reap",
		"PersistentVolumeClaim %s was retained by a predecessor of this name (persistentVolumeClaimRetentionPolicy.whenDeleted Retain) and is mounted again; delete it before recreating the session to start from an empty workspace", f.Object.GetName())
}

func predecessor(f orphan.Finding) string {
	if f.Predecessor == "" {
		return "a Session of this name that no longer exists"
	}
	return fmt.Sprintf("Session UID %s", f.Predecessor)
}

// waitMessage says which of a predecessor's objects a recreated session
// waits for.
func waitMessage(left []orphan.Finding) string {
	names := make([]string, 0, len(left))
	for _, f := range left {
		names = append(names, f.Kind+" "+f.Object.GetName())
	}
	return fmt.Sprintf("waiting for the objects a predecessor of this name left to be deleted (%s); lull never lets a new session adopt a predecessor's pod or workspace", strings.Join(names, ", "))
}
