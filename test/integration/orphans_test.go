package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// rendered waits until the controller has rendered s's identity, Service and
// StatefulSet, and returns them (the StatefulSet last).
func rendered(t *testing.T, s *lullv1.Session) []client.Object {
	t.Helper()
	identity := lullv1.RuntimeIdentityName(s.Name)
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: identity}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: identity}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: identity}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name}},
	}
	for _, o := range objs {
		eventually(t, 10*time.Second, fmt.Sprintf("%T %s is rendered for session %s", o, o.GetName(), s.UID), func(ctx context.Context) error {
			if err := admin.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
				return err
			}
			if !metav1.IsControlledBy(o, s) {
				return fmt.Errorf("controller %+v", metav1.GetControllerOf(o))
			}
			return nil
		})
	}
	return objs
}

// stripOwners removes o's owner references, as the garbage collector does
// to the dependents of an object deleted with --cascade=orphan (envtest runs
// no garbage collector).
func stripOwners(t *testing.T, o client.Object) {
	t.Helper()
	if err := admin.Patch(t.Context(), o, client.RawPatch(types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/ownerReferences"}]`))); err != nil {
		t.Fatalf("strip the owner references of %T %s: %v", o, o.GetName(), err)
	}
}

// deleteSession deletes s and waits until it is gone.
func deleteSession(t *testing.T, s *lullv1.Session) {
	t.Helper()
	if err := admin.Delete(t.Context(), s, client.Preconditions{UID: &s.UID}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "session "+s.Name+" is gone", func(ctx context.Context) error {
		err := admin.Get(ctx, client.ObjectKeyFromObject(s), &lullv1.Session{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}

// gone returns nil once o (that very object, by UID) no longer exists.
func gone(ctx context.Context, o client.Object) error {
	cur := o.DeepCopyObject().(client.Object)
	err := admin.Get(ctx, client.ObjectKeyFromObject(o), cur)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	case cur.GetUID() != o.GetUID():
		return nil
	}
	return fmt.Errorf("%T %s (uid %s) still exists", o, o.GetName(), o.GetUID())
}

// hasEvent returns nil once an Event with reason whose note contains name is
// recorded in ns.
func hasEvent(ctx context.Context, ns, reason, name string) error {
	var list eventsv1.EventList
	if err := admin.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return err
	}
	for _, e := range list.Items {
		if e.Reason == reason && (name == "" || containsWord(e.Note, name)) {
			return nil
		}
	}
	return fmt.Errorf("no %s Event naming %q among %d", reason, name, len(list.Items))
}

func containsWord(s, w string) bool { return errContains(errors.New(s), w) }

// A Session deleted with --cascade=orphan leaves its objects without owner
// references; the reaper deletes them, its pod too, with an Event each.
func TestOrphansOfADeletedSessionAreReaped(t *testing.T) {
	t.Parallel()
	ns := startManager(t)
	n := runs.Add(1)
	tpl := newTemplate(ns, fmt.Sprintf("orphan-tpl%d", n), "example.com/runtime:v1")
	if err := admin.Create(t.Context(), tpl); err != nil {
		t.Fatal(err)
	}
	s := newSession(ns, fmt.Sprintf("orphaned%d", n), tpl.Name)
	if err := admin.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	objs := rendered(t, s)
	pod := createPod(t, objs[4].(*appsv1.StatefulSet), "rev-1")

	deleteSession(t, s)
	for _, o := range objs {
		stripOwners(t, o)
	}
	for _, o := range append(objs, pod) {
		eventually(t, 15*time.Second, fmt.Sprintf("%T %s is reaped", o, o.GetName()), func(ctx context.Context) error { return gone(ctx, o) })
	}
	for _, name := range []string{"StatefulSet " + s.Name, "Pod " + pod.Name, "ServiceAccount " + lullv1.RuntimeIdentityName(s.Name)} {
		eventually(t, 10*time.Second, lullv1.ReasonOrphanReaped+" Event for "+name, func(ctx context.Context) error {
			return hasEvent(ctx, ns, lullv1.ReasonOrphanReaped, name)
		})
	}
}

// A live session's own StatefulSet that lost its owner reference is not a
// predecessor's: it gets its owner reference back and keeps its pod.
func TestLostOwnerReferenceOfALiveSessionIsRestored(t *testing.T) {
	t.Parallel()
	ns := startManager(t)
	n := runs.Add(1)
	tpl := newTemplate(ns, fmt.Sprintf("restore-tpl%d", n), "example.com/runtime:v1")
	if err := admin.Create(t.Context(), tpl); err != nil {
		t.Fatal(err)
	}
	s := newSession(ns, fmt.Sprintf("restore%d", n), tpl.Name)
	if err := admin.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	objs := rendered(t, s)
	sts := objs[4].(*appsv1.StatefulSet)
	if got := sts.Labels[lullv1.LabelSessionUID]; got != string(s.UID) {
		t.Fatalf("StatefulSet label %s = %q, want the session's UID %s", lullv1.LabelSessionUID, got, s.UID)
	}
	if _, ok := sts.Spec.Template.Labels[lullv1.LabelSessionUID]; ok {
		t.Errorf("the pod template carries %s: every session's update revision would change with it", lullv1.LabelSessionUID)
	}
	pod := createPod(t, sts, "rev-1")

	stripOwners(t, sts)
	stripOwners(t, objs[0])
	for _, o := range []client.Object{sts, objs[0]} {
		eventually(t, 10*time.Second, fmt.Sprintf("the owner reference of %T %s is restored", o, o.GetName()), func(ctx context.Context) error {
			cur := o.DeepCopyObject().(client.Object)
			if err := admin.Get(ctx, client.ObjectKeyFromObject(o), cur); err != nil {
				return err
			}
			if cur.GetUID() != o.GetUID() {
				return fmt.Errorf("replaced (uid %s, was %s): a live session's object must never be recreated", cur.GetUID(), o.GetUID())
			}
			if !metav1.IsControlledBy(cur, s) {
				return fmt.Errorf("controller %+v", metav1.GetControllerOf(cur))
			}
			return nil
		})
	}
	if err := podGone(t.Context(), pod); err == nil {
		t.Fatal("the live session's pod was deleted")
	}
	eventually(t, 10*time.Second, lullv1.ReasonOwnerReferenceRestored+" Event", func(ctx context.Context) error {
		return hasEvent(ctx, ns, lullv1.ReasonOwnerReferenceRestored, "StatefulSet "+sts.Name)
	})
}

// A Session recreated under the name of one whose StatefulSet and pod are
// still there (the pod orphaned from its StatefulSet too) never adopts
// them: they are reaped, the new session waits until the old pod is gone
// (PredecessorTerminating), and only then gets a StatefulSet of its own.
func TestRecreatedSessionNeverAdoptsItsPredecessorsPod(t *testing.T) {
	t.Parallel()
	ns := startManager(t)
	n := runs.Add(1)
	ctx := t.Context()
	tpl := newTemplate(ns, fmt.Sprintf("recreate-tpl%d", n), "example.com/runtime:v1")
	if err := admin.Create(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	old := newSession(ns, fmt.Sprintf("recreated%d", n), tpl.Name)
	if err := admin.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	objs := rendered(t, old)
	oldSTS := objs[4].(*appsv1.StatefulSet)
	// A finalizer of the test's holds the old pod while it is deleted, as
	// a kubelet's grace period would.
	const hold = "test.lull.dev/hold"
	oldPod := createPodWithStatus(t, oldSTS, "rev-1", func(*corev1.Pod) {})
	if err := admin.Patch(ctx, oldPod, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":["`+hold+`"]}}`))); err != nil {
		t.Fatal(err)
	}
	stripOwners(t, oldPod)

	deleteSession(t, old)
	s := newSession(ns, old.Name, tpl.Name)
	if err := admin.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "the predecessor's pod is being deleted", func(ctx context.Context) error {
		p := &corev1.Pod{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(oldPod), p); err != nil {
			return err
		}
		if p.DeletionTimestamp == nil {
			return errors.New("not deleted")
		}
		return nil
	})
	eventually(t, 15*time.Second, "the predecessor's StatefulSet is reaped", func(ctx context.Context) error { return gone(ctx, oldSTS) })
	waitStatus(t, ns, s.Name, "Ready reason "+lullv1.ReasonPredecessorTerminating, func(st lullv1.SessionStatus) bool {
		c := meta.FindStatusCondition(st.Conditions, lullv1.ConditionReady)
		return c != nil && c.Reason == lullv1.ReasonPredecessorTerminating
	})
	consistently(t, 2*time.Second, "no StatefulSet while the predecessor's pod is there", func(ctx context.Context) error {
		err := admin.Get(ctx, client.ObjectKeyFromObject(oldSTS), &appsv1.StatefulSet{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("StatefulSet %s exists (%v): it would adopt the predecessor's pod", oldSTS.Name, err)
	})
	if err := admin.Patch(ctx, oldPod, client.RawPatch(types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`))); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the predecessor's pod is gone", func(ctx context.Context) error { return gone(ctx, oldPod) })

	newObjs := rendered(t, s)
	newSTS := newObjs[4].(*appsv1.StatefulSet)
	if newSTS.UID == oldSTS.UID {
		t.Fatal("the recreated session kept its predecessor's StatefulSet")
	}
	newPod := createPod(t, newSTS, "rev-1")
	if newPod.UID == oldPod.UID {
		t.Fatal("the recreated session runs its predecessor's pod")
	}
	waitStatus(t, ns, s.Name, "the new session runs its new pod", func(st lullv1.SessionStatus) bool { return st.PodUID == newPod.UID })
	for _, name := range []string{"StatefulSet " + oldSTS.Name, "Pod " + oldPod.Name} {
		eventually(t, 10*time.Second, lullv1.ReasonOrphanReaped+" Event for "+name, func(ctx context.Context) error {
			return hasEvent(ctx, ns, lullv1.ReasonOrphanReaped, name)
		})
	}
}
