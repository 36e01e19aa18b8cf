package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/render"
)

// A second writer that widens a runtime's Role or RoleBinding and leaves
// lull's spec-hash annotation alone has the widening undone by the
// controller (the cache keeps rules and subjects for this), and the
// restored objects are then left alone: no write loop against the API
// server's copy.
func TestWidenedRuntimeIdentityIsRestored(t *testing.T) {
	t.Parallel()
	ns := startManager(t)
	ctx := t.Context()
	n := runs.Add(1)
	tpl := newTemplate(ns, fmt.Sprintf("drift-tpl%d", n), "example.com/runtime:v1")
	if err := admin.Create(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	s := newSession(ns, fmt.Sprintf("drift-s%d", n), tpl.Name)
	if err := admin.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: ns, Name: lullv1.RuntimeIdentityName(s.Name)}
	wantRules, wantSubjects := render.Role(s).Rules, render.RoleBinding(s).Subjects
	eventually(t, 10*time.Second, "the runtime's Role and RoleBinding rendered", func(ctx context.Context) error {
		if err := admin.Get(ctx, key, &rbacv1.Role{}); err != nil {
			return err
		}
		return admin.Get(ctx, key, &rbacv1.RoleBinding{})
	})

	if err := admin.Patch(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}, mergePatch(
		`{"rules":[{"apiGroups":[""],"resources":["secrets"],"verbs":["get","list"]}]}`)); err != nil {
		t.Fatal(err)
	}
	if err := admin.Patch(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}, mergePatch(fmt.Sprintf(
		`{"subjects":[{"kind":"ServiceAccount","name":%q,"namespace":%q},{"kind":"ServiceAccount","name":"intruder","namespace":%q}]}`,
		key.Name, ns, ns))); err != nil {
		t.Fatal(err)
	}
	role, binding := &rbacv1.Role{}, &rbacv1.RoleBinding{}
	eventually(t, 10*time.Second, "the widening undone", func(ctx context.Context) error {
		if err := admin.Get(ctx, key, role); err != nil {
			return err
		}
		if err := admin.Get(ctx, key, binding); err != nil {
			return err
		}
		if !equality.Semantic.DeepEqual(role.Rules, wantRules) {
			return fmt.Errorf("Role rules %+v", role.Rules)
		}
		if !equality.Semantic.DeepEqual(binding.Subjects, wantSubjects) {
			return fmt.Errorf("RoleBinding subjects %+v", binding.Subjects)
		}
		return nil
	})
	// Restored, they stay as they are: the restoring write is itself an
	// event the session is reconciled on, and a comparison the API
	// server's copy never satisfies would write them again each time.
	roleRV, bindingRV := role.ResourceVersion, binding.ResourceVersion
	time.Sleep(2 * time.Second)
	if err := admin.Get(ctx, key, role); err != nil {
		t.Fatal(err)
	}
	if err := admin.Get(ctx, key, binding); err != nil {
		t.Fatal(err)
	}
	if role.ResourceVersion != roleRV || binding.ResourceVersion != bindingRV {
		t.Errorf("restored Role or RoleBinding written again after a reconcile: resourceVersions %s→%s, %s→%s", roleRV, role.ResourceVersion, bindingRV, binding.ResourceVersion)
	}
}

// A second writer who deletes the runtime's RoleBinding and creates it
// again under its name, lull's labels, annotations, owner and subjects
// copied, but bound to ClusterRole admin (roleRef cannot be edited in
// place), would give the runtime admin in the namespace. The controller
// deletes that RoleBinding and creates its own, then leaves it alone.
func TestRuntimeRoleBindingRecreatedWithAnotherRoleIsReplaced(t *testing.T) {
	t.Parallel()
	ns := startManager(t)
	ctx := t.Context()
	n := runs.Add(1)
	tpl := newTemplate(ns, fmt.Sprintf("rebind-tpl%d", n), "example.com/runtime:v1")
	if err := admin.Create(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	s := newSession(ns, fmt.Sprintf("rebind-s%d", n), tpl.Name)
	if err := admin.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: ns, Name: lullv1.RuntimeIdentityName(s.Name)}
	want := render.RoleBinding(s)
	eventually(t, 10*time.Second, "the runtime's RoleBinding rendered", func(ctx context.Context) error {
		return admin.Get(ctx, key, &rbacv1.RoleBinding{})
	})
	// Delete lull's and create the rebound one; the controller may recreate
	// its own in between (then the create meets AlreadyExists: again).
	eventually(t, 10*time.Second, "the rebound RoleBinding in place", func(ctx context.Context) error {
		cur := &rbacv1.RoleBinding{}
		if err := admin.Get(ctx, key, cur); err == nil {
			if err := admin.Delete(ctx, cur); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		rogue := want.DeepCopy()
		rogue.RoleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "admin"}
		rogue.OwnerReferences = []metav1.OwnerReference{{APIVersion: lullv1.GroupVersion.String(), Kind: "Session", Name: s.Name, UID: s.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
		return admin.Create(ctx, rogue)
	})
	binding := &rbacv1.RoleBinding{}
	eventually(t, 10*time.Second, "the runtime's RoleBinding bound to its Role again", func(ctx context.Context) error {
		if err := admin.Get(ctx, key, binding); err != nil {
			return err
		}
		if binding.RoleRef != want.RoleRef || !equality.Semantic.DeepEqual(binding.Subjects, want.Subjects) {
			return fmt.Errorf("RoleBinding roleRef %+v, subjects %+v", binding.RoleRef, binding.Subjects)
		}
		return nil
	})
	rv := binding.ResourceVersion
	time.Sleep(2 * time.Second)
	if err := admin.Get(ctx, key, binding); err != nil {
		t.Fatal(err)
	}
	if binding.ResourceVersion != rv {
		t.Errorf("restored RoleBinding written again: resourceVersion %s→%s", rv, binding.ResourceVersion)
	}
}
