package session

import (
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"

	"lull.dev/lull/internal/render"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// errNotOwned means an object with the name lull would use exists and is not
// controlled by the session; lull never adopts or overwrites it.
type errNotOwned struct{ kind, name string }

func (e errNotOwned) Error() string {
	return fmt.Sprintf("%s %s exists and is not owned by this session; delete or rename it", e.kind, e.name)
}

// errInvalidTemplate wraps the field errors of a template that collides with
// what lull adds to a session pod (see Validate).
type errInvalidTemplate struct{ err error }

func (e errInvalidTemplate) Error() string { return e.err.Error() }

// ensure makes the object named like desired match it: created (with the
// session as controller owner) when absent, updated when the spec hash lull
// stamped differs or lull's labels are missing, left alone otherwise.
// existing receives the object as it is on the server (or in the cache).
//
// The cache holds only objects labelled lull.dev/session, so an object of
// the same name that is not in it is read from the API server through live
// when a create meets it (AlreadyExists): one the session does not control
// is refused with errNotOwned; one it controls has lost lull's labels
// (someone edited them), is relabelled and brought up to date, so it enters
// the cache again instead of silently never being updated.
//
// A write is computed against the API server's copy, read through live
// once the cached one shows that a write is needed: the cache may not show
// this controller's own last write yet, and a merge patch computed against
// such a copy leaves out every field it shares with desired, though the
// live object differs there (a StatefulSet pointed at files B, then back
// at A with a new image, would keep naming B under a spec-hash that says
// A). One extra GET per write; writes follow template changes.
func ensure[T client.Object](ctx context.Context, c client.Client, live client.Reader, s *lullv1.Session, desired, existing T, kind string, copySpec func(dst, src T)) error {
	return ensureWith(ctx, c, live, s, desired, existing, kind, copySpec, nil)
}

// ensureWith is ensure with before, when not nil, called just before the
// object is created or patched, with existing as the API server has it
// (empty for a create). An error from before stops the write.
func ensureWith[T client.Object](ctx context.Context, c client.Client, live client.Reader, s *lullv1.Session, desired, existing T, kind string, copySpec func(dst, src T), before func(existing T) error) error {
	if err := c.Get(ctx, client.ObjectKeyFromObject(desired), existing); err != nil {
		if !apierrors.IsNotFound(err) {
			return err
		}
		if err := controllerutil.SetControllerReference(s, desired, c.Scheme()); err != nil {
			return err
		}
		if before != nil {
			if err := before(existing); err != nil {
				return err
			}
		}
		err := c.Create(ctx, desired)
		switch {
		case apierrors.IsAlreadyExists(err):
			if err := live.Get(ctx, client.ObjectKeyFromObject(desired), existing); err != nil {
				return err
			}
		case err != nil:
			return fmt.Errorf("create %s %s: %w", kind, desired.GetName(), err)
		default:
			copySpec(existing, desired)
			existing.SetLabels(desired.GetLabels())
			existing.SetAnnotations(desired.GetAnnotations())
			return nil
		}
	}
	if !metav1.IsControlledBy(existing, s) {
		return errNotOwned{kind: kind, name: existing.GetName()}
	}
	upToDate := func() bool {
		return existing.GetAnnotations()[render.AnnotationSpecHash] == desired.GetAnnotations()[render.AnnotationSpecHash] && hasLabels(existing, desired.GetLabels()) &&
			!grantsDrifted(existing, desired)
	}
	if upToDate() {
		return nil
	}
	// The patch base must be the API server's copy (see ensure).
	if err := live.Get(ctx, client.ObjectKeyFromObject(desired), existing); err != nil {
		return err
	}
	if !metav1.IsControlledBy(existing, s) {
		return errNotOwned{kind: kind, name: existing.GetName()}
	}
	if upToDate() {
		return nil
	}
	if before != nil {
		if err := before(existing); err != nil {
			return err
		}
	}
	// A merge patch, not an update: the cached object's resourceVersion is
	// often behind (the StatefulSet controller writes status), and what lull
	// renders is the whole of what it owns.
	patch := client.MergeFrom(existing.DeepCopyObject().(T))
	copySpec(existing, desired)
	existing.SetLabels(merge(existing.GetLabels(), desired.GetLabels()))
	existing.SetAnnotations(merge(existing.GetAnnotations(), desired.GetAnnotations()))
	if err := c.Patch(ctx, existing, patch, client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("update %s %s: %w", kind, existing.GetName(), err)
	}
	return nil
}

// grantsDrifted reports whether what the runtime's identity grants differs
// from what lull renders: a Role's rules, or a RoleBinding's subjects. A
// second writer that widens them and leaves lull's spec-hash annotation
// alone would otherwise keep the extra permissions for good; the runtime's
// least privilege is the one edit of a rendered object lull undoes on
// sight. Other kinds follow the annotation only (a comparison of pod
// templates would fight the API server's defaulting). The cache keeps
// rules and subjects for this (manager's stripSpec).
func grantsDrifted(existing, desired client.Object) bool {
	switch e := existing.(type) {
	case *rbacv1.Role:
		return !equality.Semantic.DeepEqual(e.Rules, desired.(*rbacv1.Role).Rules)
	case *rbacv1.RoleBinding:
		d := desired.(*rbacv1.RoleBinding)
		return e.RoleRef != d.RoleRef || !equality.Semantic.DeepEqual(e.Subjects, d.Subjects)
	}
	return false
}

// hasLabels reports whether o carries every label of want.
func hasLabels(o client.Object, want map[string]string) bool {
	have := o.GetLabels()
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

func merge(dst, src map[string]string) map[string]string {
	if dst == nil {
		dst = map[string]string{}
	}
	for k, v := range src {
		dst[k] = v
	}
	return dst
}

// ensureIdentity makes the runtime's ServiceAccount, Role and RoleBinding.
func ensureIdentity(ctx context.Context, c client.Client, live client.Reader, s *lullv1.Session) error {
	if err := ensure(ctx, c, live, s, render.ServiceAccount(s), &corev1.ServiceAccount{}, "ServiceAccount", func(dst, src *corev1.ServiceAccount) {}); err != nil {
		return err
	}
	if err := ensure(ctx, c, live, s, render.Role(s), &rbacv1.Role{}, "Role", func(dst, src *rbacv1.Role) { dst.Rules = src.Rules }); err != nil {
		return err
	}
	desired := render.RoleBinding(s)
	return ensureWith(ctx, c, live, s, desired, &rbacv1.RoleBinding{}, "RoleBinding", func(dst, src *rbacv1.RoleBinding) {
		dst.Subjects = src.Subjects
		dst.RoleRef = src.RoleRef
	}, func(existing *rbacv1.RoleBinding) error { return deleteRebound(ctx, c, existing, desired) })
}

// deleteRebound deletes the session's RoleBinding, as the API server has
// it (existing; empty before a create), when it binds another role than
// desired: a second writer deleted it and created it again under its name
// (lull's labels, spec hash, owner and subjects copied, or its
// lull.dev/session-uid label, from which the reaper restores the owner)
// bound to, say, ClusterRole admin, which would give the runtime that role
// in the namespace. roleRef cannot be changed in place (the API server
// refuses the patch), so it is deleted with a UID precondition (a 404 or
// 409 is a no-op) and the returned error stops this write; the next
// reconcile, which the deletion triggers, creates lull's own.
func deleteRebound(ctx context.Context, c client.Client, existing, desired *rbacv1.RoleBinding) error {
	if existing.ResourceVersion == "" || existing.RoleRef == desired.RoleRef { // empty: before a create
		return nil
	}
	uid := existing.UID
	err := c.Delete(ctx, existing, client.Preconditions{UID: &uid})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete RoleBinding %s bound to %s %s: %w", existing.Name, existing.RoleRef.Kind, existing.RoleRef.Name, err)
	}
	return fmt.Errorf("RoleBinding %s was bound to %s %s, not the runtime's Role: deleted, to be created anew", existing.Name, existing.RoleRef.Kind, existing.RoleRef.Name)
}

// ensureService makes the session's headless Service.
func ensureService(ctx context.Context, c client.Client, live client.Reader, s *lullv1.Session, t *lullv1.SessionTemplate) error {
	return ensure(ctx, c, live, s, render.Service(s, t), &corev1.Service{}, "Service", func(dst, src *corev1.Service) {
		dst.Spec.Ports = src.Spec.Ports
		dst.Spec.Selector = src.Spec.Selector
		dst.Spec.PublishNotReadyAddresses = src.Spec.PublishNotReadyAddresses
	})
}

// ensureStatefulSet makes the session's StatefulSet carry the template's
// current runtime at once: the StatefulSet controller then publishes the new
// update revision, and the rollout decides when the pod moves to it.
func ensureStatefulSet(ctx context.Context, c client.Client, live client.Reader, s *lullv1.Session, t *lullv1.SessionTemplate, replicas int32, now time.Time) (*appsv1.StatefulSet, error) {
	desired, err := render.StatefulSet(s, t, replicas)
	if err != nil {
		return nil, errInvalidTemplate{err}
	}
	existing := &appsv1.StatefulSet{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(desired), existing); err == nil && metav1.IsControlledBy(existing, s) {
		if err := sameClaims(existing, desired); err != nil {
			return nil, errInvalidTemplate{err}
		}
	}
	// Claim templates are immutable on a StatefulSet (and on a
	// SessionTemplate); the retention policy is not. The files ConfigMap
	// is marked referenced just before the write, judged on the API
	// server's copy of the StatefulSet: a cached copy that lags this
	// controller's last write may already name it when the live one does
	// not.
	err = ensureWith(ctx, c, live, s, desired, existing, "StatefulSet", func(dst, src *appsv1.StatefulSet) {
		dst.Spec.Replicas = src.Spec.Replicas
		dst.Spec.Template = src.Spec.Template
		dst.Spec.UpdateStrategy = src.Spec.UpdateStrategy
		dst.Spec.PersistentVolumeClaimRetentionPolicy = src.Spec.PersistentVolumeClaimRetentionPolicy
	}, func(live *appsv1.StatefulSet) error { return touchFiles(ctx, c, t, desired, live, now) })
	return existing, err
}

// sameClaims refuses a pod template for a StatefulSet whose claim templates
// are not the ones it was rendered with. The SessionTemplate's CEL rule
// keeps claim templates from changing, but a template deleted and created
// again under its name passes it. A StatefulSet's claim templates cannot
// change, so the session would never get the new claims, yet its pod would
// be drained and replaced for them (the revision changed); a pod template
// mounting one of them the StatefulSet API refuses less clearly.
//
// The StatefulSet records the hash of its claim templates as rendered
// (render.AnnotationClaimTemplatesHash), which tells a changed size or class too;
// one created before lull recorded it is compared by claim names.
func sameClaims(existing, desired *appsv1.StatefulSet) error {
	have, want := claimNames(existing), claimNames(desired)
	if h, ok := existing.Annotations[render.AnnotationClaimTemplatesHash]; ok {
		if h == desired.Annotations[render.AnnotationClaimTemplatesHash] {
			return nil
		}
	} else if slices.Equal(have, want) {
		return nil
	}
	return field.ErrorList{field.Invalid(field.NewPath("spec", "volumeClaimTemplates"), want,
		fmt.Sprintf("this session was created with the claim templates %v, and a session's claim templates cannot change; create a new Session (or restore the template's claim templates)", have))}.ToAggregate()
}

func claimNames(sts *appsv1.StatefulSet) []string {
	names := []string{}
	for _, c := range sts.Spec.VolumeClaimTemplates {
		names = append(names, c.Name)
	}
	slices.Sort(names)
	return names
}
