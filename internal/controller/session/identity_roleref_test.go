package session

import (
	"context"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/testenv"
	"lull.dev/lull/internal/render"
)

// TestRuntimeRoleBindingPointedElsewhereIsRecreated: a second writer who
// deletes the runtime's RoleBinding and creates it again under its name,
// copying lull's labels, spec-hash annotation, owner reference and
// subjects, but with roleRef naming a ClusterRole (admin), gives the
// session's runtime that ClusterRole's permissions in the namespace. The
// subjects and the hash are as lull rendered them, so only roleRef tells;
// roleRef cannot be changed in place (the API server refuses it), so lull
// must delete that RoleBinding (UID precondition) and create its own.
//
// The same holds for one without lull's labels (so not in the manager's
// label-selected cache) that keeps the owner reference: the create meets
// it, and the write computed against the API server's copy must delete
// it rather than patch a roleRef the API server refuses to change.
func TestRuntimeRoleBindingPointedElsewhereIsRecreated(t *testing.T) {
	for _, labelled := range []bool{true, false} {
		t.Run(map[bool]string{true: "labelled", false: "unlabelled"}[labelled], func(t *testing.T) { testRebound(t, labelled) })
	}
}

func testRebound(t *testing.T, labelled bool) {
	ctx := context.Background()
	s := &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "agents", Name: "alice", UID: "uid-alice"},
		Spec: lullv1.SessionSpec{TemplateRef: lullv1.TemplateReference{Name: "coder"}}}
	widened := render.RoleBinding(s)
	widened.UID = "uid-rogue-binding"
	widened.RoleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "admin"}
	widened.OwnerReferences = []metav1.OwnerReference{{APIVersion: lullv1.GroupVersion.String(), Kind: "Session", Name: s.Name, UID: s.UID,
		Controller: ptrTo(true), BlockOwnerDeletion: ptrTo(true)}}
	if !labelled {
		widened.Labels, widened.Annotations = nil, nil
	}
	var deletes []client.DeleteOptions
	// As the API server: a RoleBinding's roleRef is immutable.
	refuseRoleRef := func(ctx context.Context, c client.WithWatch, o client.Object) error {
		rb, ok := o.(*rbacv1.RoleBinding)
		if !ok {
			return nil
		}
		stored := &rbacv1.RoleBinding{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(rb), stored); err != nil {
			return nil
		}
		if stored.RoleRef != rb.RoleRef {
			return apierrors.NewInvalid(schema.GroupKind{Group: rbacv1.GroupName, Kind: "RoleBinding"}, rb.Name,
				field.ErrorList{field.Invalid(field.NewPath("roleRef"), rb.RoleRef, "cannot change roleRef")})
		}
		return nil
	}
	funcs := interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
			if err := refuseRoleRef(ctx, c, o); err != nil {
				return err
			}
			return c.Update(ctx, o, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			if err := refuseRoleRef(ctx, c, o); err != nil {
				return err
			}
			return c.Patch(ctx, o, p, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
			var do client.DeleteOptions
			do.ApplyOptions(opts)
			deletes = append(deletes, do)
			return c.Delete(ctx, o, opts...)
		},
	}
	sch := testenv.Scheme()
	base := withSessionIndex(fake.NewClientBuilder(), sch).WithScheme(sch).WithObjects(widened).Build()
	live := interceptor.NewClient(base, funcs)
	// The manager's cache holds only objects labelled lull.dev/session.
	funcs.Get = func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
		if err := c.Get(ctx, key, o, opts...); err != nil {
			return err
		}
		if _, ok := o.GetLabels()[lullv1.LabelSession]; !ok {
			return apierrors.NewNotFound(schema.GroupResource{Group: rbacv1.GroupName, Resource: "rolebindings"}, key.Name)
		}
		return nil
	}
	c := interceptor.NewClient(base, funcs)
	// A reconcile may need a second pass (the first deletes); two are
	// plenty.
	for range 2 {
		_, _ = ensureIdentity(ctx, c, live, s, restoring{})
	}
	got := &rbacv1.RoleBinding{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: widened.Name}, got); err != nil {
		t.Fatalf("the runtime's RoleBinding: %v", err)
	}
	if want := render.RoleBinding(s).RoleRef; got.RoleRef != want {
		t.Errorf("RoleBinding roleRef %+v, want the session's Role %+v: the runtime keeps a second writer's ClusterRole", got.RoleRef, want)
	}
	for _, d := range deletes {
		if d.Preconditions == nil || d.Preconditions.UID == nil {
			t.Errorf("RoleBinding deleted without a UID precondition: %+v", d)
		}
	}
}
