package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"lull.dev/lull/internal/render"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
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

// keep says how ensure keeps one kind of object as lull renders it.
type keep[T client.Object] struct {
	kind string
	// copySpec copies lull's part of the spec from src, as rendered, to dst.
	copySpec func(dst, src T)
	// drift, when not nil, describes the first field of lull's part of the
	// spec that existing holds otherwise than desired, as far as existing
	// shows it (a cached copy keeps only part of some specs: manager's
	// stripSpec); "" when none.
	drift func(existing, desired T) string
	// foreign, when not nil, describes another writer's change that
	// existing shows under a spec hash other than the one desired carries
	// (a restore of an older copy brings that copy's hash along); "" when
	// the hash is lull's own older one.
	foreign func(existing, desired T) string
	// before, when not nil, is called just before the object is created or
	// patched, with existing as the API server has it (empty for a
	// create) and the drift the write undoes ("" for a create or lull's
	// own change). An error from it stops the write.
	before func(existing T, drift string) error
	// annotate, when not nil, gives annotations the write sets beside
	// desired's, computed on existing as the API server has it (empty for
	// a create). They are not compared as desired's are: they record the
	// write itself (lull.dev/spec-written).
	annotate func(existing T) map[string]string
	// written, when not nil, is called with the API server's response to
	// a create or patch that landed. An error from it is ensure's.
	written func(written T) error
	// undid, when not nil, reports whether the write from before to after
	// (the API server's response) changed what the drift was about; nil
	// means whether it moved the resourceVersion. A write the API server
	// finds already made records no Event.
	undid func(before, after T) bool
	// lock, when not nil, reports whether the write of desired over
	// existing (the API server's copy) must land only on one version of
	// it, and which: carried as the patch's precondition (see
	// lockedPatch).
	lock func(existing, desired T) (resourceVersion string, locked bool)
}

// errDecidedOnNothing is the conflict of a destructive write decided on
// no object: the object exists now, so the decision is made again.
func errDecidedOnNothing(kind, name string) error {
	return apierrors.NewConflict(schema.GroupResource{Resource: kind}, name,
		fmt.Errorf("decided on no %s, and one exists now", kind))
}

// lockedPatch is the merge patch from base compare-and-swapped on the
// resourceVersion rv: the API server refuses it with 409 once the object
// has moved past rv, and the caller decides again. base is not changed;
// rv "" is a decision made on no object (errDecidedOnNothing).
//
// Two writes of a StatefulSet need it. One that lowers its replicas
// (which makes the StatefulSet controller delete a pod) lands only on
// the copy the reconcile read before it decided: any pod created or
// replaced since moved the StatefulSet's status and so its
// resourceVersion, and the write is refused instead of deleting a pod the
// decision never saw (an old leader's late scale-down after a resume).
// Every other write of its spec lands only on the copy it was computed
// against, as it records the generation it produces
// (lull.dev/spec-written): merged over another writer's change made in
// between, it would record that writer's spec as lull's.
func lockedPatch(base client.Object, kind, rv string) (client.Patch, error) {
	if rv == "" {
		return nil, errDecidedOnNothing(kind, base.GetName())
	}
	locked := base.DeepCopyObject().(client.Object)
	locked.SetResourceVersion(rv)
	return client.MergeFromWithOptions(locked, client.MergeFromWithOptimisticLock{}), nil
}

// restoring is how ensure spaces its restores of an object another writer
// keeps changing back: the reconciler's streaks (restoreStreaks), shared
// by every kind it keeps, and the reconcile's clock. The zero value
// spaces nothing (a caller outside the reconcile).
type restoring struct {
	streaks *restoreStreaks
	now     time.Time
}

func (r restoring) allow(key restoreKey, uid types.UID, rendered, drift string) error {
	if r.streaks == nil {
		return nil
	}
	return r.streaks.allow(key, uid, rendered, drift, r.now)
}

func (r restoring) restored(key restoreKey, uid types.UID, rendered string) int {
	if r.streaks == nil {
		return 1
	}
	return r.streaks.restored(key, uid, rendered, r.now)
}

// statefulSetLock is the keep.lock of a StatefulSet whose decision was
// made on the copy at decidedOn (see lockedPatch): a write that lowers
// its replicas lands only on decidedOn, any other only on existing's
// version.
func statefulSetLock(decidedOn string) func(existing, desired *appsv1.StatefulSet) (string, bool) {
	return func(existing, desired *appsv1.StatefulSet) (string, bool) {
		if ptr.Deref(desired.Spec.Replicas, 1) < ptr.Deref(existing.Spec.Replicas, 1) {
			return decidedOn, true
		}
		return existing.ResourceVersion, true
	}
}

// ensure makes the object named like desired match it: created (with the
// session as controller owner) when absent, written when the spec hash
// lull stamped differs (lull renders something new), or when a field lull
// renders was changed by another writer under an unchanged hash: one of
// lull's labels or annotations, or what k.drift compares. It returns
// that drift, described as "<kind> <name>: <field> ...", once the write
// that undid it has changed the object (k.undid); "" otherwise, and with
// the error of k.written, which follows a write that landed. existing
// receives the object as it is on the server (or in the cache). A
// comparison that finds nothing costs no request.
//
// The cache holds only objects labelled lull.dev/session, so an object of
// the same name that is not in it is read from the API server through live
// when a create meets it (AlreadyExists): one the session does not control
// is refused with errNotOwned; one it controls has lost lull's labels
// (someone edited them), is relabelled and brought up to date, so it enters
// the cache again instead of silently never being updated.
//
// A restore (a write that undoes another writer's change) is spaced by
// rs: one that comes too soon after the last restore of the same object
// (restoreAt) to the same render is not written, and ensure returns
// errRestoreDeferred (a new render, after a template change, is). Every
// restore that lands counts in the object's streak, also one that changed
// nothing but lull's record of its own write (k.undid false): its drift is
// returned when it changed what the drift was about, or when it is not
// the first in a row, naming how many, so a writer that strips what lull
// sets after each write is fought as slowly, and as visibly, as any
// other.
//
// A write is computed against the API server's copy, read through live
// once the cached one shows that a write is needed: the cache may not show
// this controller's own last write yet, and a merge patch computed against
// such a copy leaves out every field it shares with desired, though the
// live object differs there (a StatefulSet pointed at files B, then back
// at A with a new image, would keep naming B under a spec-hash that says
// A). One extra GET per write; writes follow template changes and drift.
func ensure[T client.Object](ctx context.Context, c client.Client, live client.Reader, s *lullv1.Session, desired, existing T, k keep[T], rs restoring) (string, error) {
	if err := c.Get(ctx, client.ObjectKeyFromObject(desired), existing); err != nil {
		if !apierrors.IsNotFound(err) {
			return "", err
		}
		if err := controllerutil.SetControllerReference(s, desired, c.Scheme()); err != nil {
			return "", err
		}
		if k.before != nil {
			if err := k.before(existing, ""); err != nil {
				return "", err
			}
		}
		// desired stays as rendered: it is compared below when the create
		// meets an object of its name.
		created := desired.DeepCopyObject().(T)
		if k.annotate != nil {
			created.SetAnnotations(merge(created.GetAnnotations(), k.annotate(existing)))
		}
		err := c.Create(ctx, created)
		switch {
		case apierrors.IsAlreadyExists(err):
			if err := live.Get(ctx, client.ObjectKeyFromObject(desired), existing); err != nil {
				return "", err
			}
		case err != nil:
			return "", fmt.Errorf("create %s %s: %w", k.kind, desired.GetName(), err)
		default:
			k.copySpec(existing, created)
			existing.SetName(created.GetName())
			existing.SetNamespace(created.GetNamespace())
			existing.SetLabels(created.GetLabels())
			existing.SetAnnotations(created.GetAnnotations())
			existing.SetUID(created.GetUID())
			existing.SetGeneration(created.GetGeneration())
			existing.SetResourceVersion(created.GetResourceVersion())
			if k.written != nil {
				return "", k.written(existing)
			}
			return "", nil
		}
	}
	if !metav1.IsControlledBy(existing, s) {
		return "", errNotOwned{kind: k.kind, name: existing.GetName()}
	}
	drift, needed := k.change(existing, desired)
	if !needed {
		return "", nil
	}
	// The patch base must be the API server's copy (see above).
	if err := live.Get(ctx, client.ObjectKeyFromObject(desired), existing); err != nil {
		return "", err
	}
	if !metav1.IsControlledBy(existing, s) {
		return "", errNotOwned{kind: k.kind, name: existing.GetName()}
	}
	if drift, needed = k.change(existing, desired); !needed {
		return "", nil
	}
	key := restoreKey{kind: k.kind, session: client.ObjectKeyFromObject(s), name: desired.GetName()}
	rendered := desired.GetAnnotations()[render.AnnotationSpecHash]
	if drift != "" {
		if err := rs.allow(key, existing.GetUID(), rendered, drift); err != nil {
			return "", err
		}
	}
	if k.before != nil {
		if err := k.before(existing, drift); err != nil {
			return "", err
		}
	}
	// A merge patch, not an update: the cached object's resourceVersion is
	// often behind (the StatefulSet controller writes status), and what lull
	// renders is the whole of what it owns.
	before := existing.DeepCopyObject().(T)
	patch := client.MergeFrom(before)
	if k.lock != nil {
		if rv, locked := k.lock(existing, desired); locked {
			var err error
			if patch, err = lockedPatch(existing, k.kind, rv); err != nil {
				return "", err
			}
		}
	}
	var extra map[string]string
	if k.annotate != nil {
		extra = k.annotate(existing)
	}
	k.copySpec(existing, desired)
	existing.SetLabels(merge(existing.GetLabels(), desired.GetLabels()))
	existing.SetAnnotations(merge(merge(existing.GetAnnotations(), desired.GetAnnotations()), extra))
	if err := c.Patch(ctx, existing, patch, client.FieldOwner(lullv1.FieldManagerController)); err != nil {
		return "", fmt.Errorf("update %s %s: %w", k.kind, existing.GetName(), err)
	}
	landed := existing.GetResourceVersion() != before.GetResourceVersion()
	undid := landed
	if k.undid != nil {
		undid = k.undid(before, existing)
	}
	restore := 0
	if drift != "" && landed {
		restore = rs.restored(key, existing.GetUID(), rendered)
	}
	switch {
	case restore == 0 || (!undid && restore == 1):
		// lull's own change; a write the API server found already made
		// (the other writer undid its edit, or admission rewrites what
		// lull renders the same way each time); or the first write of
		// lull's record alone (an older lull's object).
		drift = ""
	case restore == 1:
		drift = fmt.Sprintf("%s %s: %s", k.kind, existing.GetName(), drift)
	default:
		drift = fmt.Sprintf("%s %s: %s (restore %d in a row: another writer keeps changing it back, so each restore waits twice as long as the last, up to %s; stop that writer)",
			k.kind, existing.GetName(), drift, restore, lastRestoreWait)
	}
	if k.written != nil {
		// The drift undone is returned with the error: the write landed.
		return drift, k.written(existing)
	}
	return drift, nil
}

// change reports whether existing must be written to match desired, and
// the drift that makes it so: "" when lull renders something new (the
// spec hash differs and k.foreign finds no other writer's change), or a
// description of the field another writer changed.
func (k keep[T]) change(existing, desired T) (drift string, needed bool) {
	if existing.GetAnnotations()[render.AnnotationSpecHash] != desired.GetAnnotations()[render.AnnotationSpecHash] {
		if k.foreign != nil {
			return k.foreign(existing, desired), true
		}
		return "", true
	}
	if f := metadataDrift(existing, desired); f != "" {
		return f, true
	}
	if k.drift != nil {
		if f := k.drift(existing, desired); f != "" {
			return f, true
		}
	}
	return "", false
}

// metadataDrift describes the first of the labels and annotations desired
// carries that existing lacks or holds otherwise; "" when none.
func metadataDrift(existing, desired client.Object) string {
	if f := missingEntry("metadata.labels", existing.GetLabels(), desired.GetLabels()); f != "" {
		return f
	}
	return missingEntry("metadata.annotations", existing.GetAnnotations(), desired.GetAnnotations())
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
// It returns the drift it undid (see ensure), one entry per object.
//
// A restore that must wait (errRestoreDeferred) does not keep the objects
// after it from being made; the first such wait is returned once they
// are.
func ensureIdentity(ctx context.Context, c client.Client, live client.Reader, s *lullv1.Session, rs restoring) ([]string, error) {
	var drifts []string
	var deferred error
	note := func(drift string, err error) error {
		if drift != "" {
			drifts = append(drifts, drift)
		}
		if errors.As(err, new(errRestoreDeferred)) {
			if deferred == nil {
				deferred = err
			}
			return nil
		}
		return err
	}
	if err := note(ensure(ctx, c, live, s, render.ServiceAccount(s), &corev1.ServiceAccount{}, keep[*corev1.ServiceAccount]{
		kind: "ServiceAccount", copySpec: func(dst, src *corev1.ServiceAccount) {}}, rs)); err != nil {
		return drifts, err
	}
	if err := note(ensure(ctx, c, live, s, render.Role(s), &rbacv1.Role{}, keep[*rbacv1.Role]{
		kind: "Role", copySpec: func(dst, src *rbacv1.Role) { dst.Rules = src.Rules },
		drift: func(e, d *rbacv1.Role) string { return grantsDrift(e, d) }}, rs)); err != nil {
		return drifts, err
	}
	desired := render.RoleBinding(s)
	if err := note(ensure(ctx, c, live, s, desired, &rbacv1.RoleBinding{}, keep[*rbacv1.RoleBinding]{
		kind: "RoleBinding",
		copySpec: func(dst, src *rbacv1.RoleBinding) {
			dst.Subjects = src.Subjects
			dst.RoleRef = src.RoleRef
		},
		drift:  func(e, d *rbacv1.RoleBinding) string { return grantsDrift(e, d) },
		before: func(existing *rbacv1.RoleBinding, _ string) error { return deleteRebound(ctx, c, existing, desired) }}, rs)); err != nil {
		return drifts, err
	}
	return drifts, deferred
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

// ensureService makes the session's headless Service; it returns the drift
// it undid (see ensure), or errRestoreDeferred for a restore that waits.
func ensureService(ctx context.Context, c client.Client, live client.Reader, s *lullv1.Session, t *lullv1.SessionTemplate, rs restoring) (string, error) {
	return ensure(ctx, c, live, s, render.Service(s, t), &corev1.Service{}, keep[*corev1.Service]{
		kind: "Service",
		copySpec: func(dst, src *corev1.Service) {
			dst.Spec.Ports = servicePorts(dst.Spec.Ports, src.Spec.Ports)
			dst.Spec.Selector = src.Spec.Selector
			dst.Spec.PublishNotReadyAddresses = src.Spec.PublishNotReadyAddresses
		},
		drift: serviceDrift,
	}, rs)
}

// ensureStatefulSet makes the session's StatefulSet carry the template's
// current runtime at once: the StatefulSet controller then publishes the new
// update revision, and the rollout decides when the pod moves to it. It
// returns the drift it undid (see ensure): a spec another writer changed,
// as its record of lull's own last write tells (writtenBy), or any field
// of one that has no record (created by an older lull), which is written
// once as lull renders it.
//
// Every write of the spec records, in the same request, the generation it
// produces (lull.dev/spec-written, specWrittenClaim), and lands only on
// the copy it was computed against; a claim the response belies is
// corrected at once (recordSpecWritten). Restores of a StatefulSet another
// writer keeps changing back are spaced, as every object ensure keeps is
// (restoreAt): one that must wait returns errRestoreDeferred with the
// StatefulSet as the API server has it, and the reconcile takes no step
// that acts on a spec that is not lull's (heldForRestore).
//
// decidedOn is the resourceVersion of the StatefulSet as the reconcile
// read it before deciding replicas ("" when it read none): a write that
// lowers the replicas lands only on that version (lockedPatch), and a
// 409 is a retry of the step. A write that changes the runtime image of
// the API server's copy, creates the StatefulSet, or raises its replicas
// from zero (a resume) is made only when the catalog on the API server
// lists the runtime image it renders (confirmWrite); otherwise it is a
// 409 too.
func ensureStatefulSet(ctx context.Context, c client.Client, live client.Reader, s *lullv1.Session, t *lullv1.SessionTemplate, replicas int32, decidedOn string, now time.Time, restores *restoreStreaks) (*appsv1.StatefulSet, string, error) {
	desired, err := render.StatefulSet(s, t, replicas)
	if err != nil {
		return nil, "", errInvalidTemplate{err}
	}
	existing := &appsv1.StatefulSet{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(desired), existing); err == nil && metav1.IsControlledBy(existing, s) {
		if err := sameClaims(existing, desired); err != nil {
			return nil, "", errInvalidTemplate{err}
		}
	}
	hash := desired.Annotations[render.AnnotationSpecHash]
	// Claim templates are immutable on a StatefulSet (and on a
	// SessionTemplate); the retention policy is not. The files ConfigMap
	// is marked referenced just before the write, judged on the API
	// server's copy of the StatefulSet: a cached copy that lags this
	// controller's last write may already name it when the live one does
	// not.
	drift, err := ensure(ctx, c, live, s, desired, existing, keep[*appsv1.StatefulSet]{
		kind: "StatefulSet",
		copySpec: func(dst, src *appsv1.StatefulSet) {
			dst.Spec.Replicas = src.Spec.Replicas
			dst.Spec.Template = src.Spec.Template
			dst.Spec.UpdateStrategy = src.Spec.UpdateStrategy
			dst.Spec.PersistentVolumeClaimRetentionPolicy = src.Spec.PersistentVolumeClaimRetentionPolicy
		},
		drift: func(e, d *appsv1.StatefulSet) string {
			edit, _ := writtenBy(e)
			if edit == "" {
				return "" // the spec lull last wrote, as admission left it
			}
			if f := statefulSetDrift(e, d); f != "" {
				return f // the field, when the cache shows it
			}
			return edit
		},
		foreign: func(e, d *appsv1.StatefulSet) string {
			// Under another spec hash, the record tells lull's own older
			// write (the template changed) from another writer's; one
			// without a record is taken as lull's own, written by an
			// older lull.
			edit, recorded := writtenBy(e)
			if edit == "" || !recorded {
				return ""
			}
			if f := statefulSetDrift(e, d); f != "" {
				return f
			}
			return edit
		},
		before: func(onServer *appsv1.StatefulSet, _ string) error {
			// A write that starts a pod, or changes the image every pod
			// the StatefulSet controller creates from then on runs, is
			// judged on the API server's StatefulSet and catalog: the
			// gate judged cached copies.
			was := onServer
			if onServer.ResourceVersion == "" {
				was = nil // a create: the API server has none
			}
			if err := confirmWrite(ctx, live, was, desired); err != nil {
				return err
			}
			return touchFiles(ctx, c, t, desired, onServer, now)
		},
		annotate: func(live *appsv1.StatefulSet) map[string]string {
			return map[string]string{lullv1.AnnotationSpecWritten: specWrittenClaim(live, hash)}
		},
		written: func(w *appsv1.StatefulSet) error { return recordSpecWritten(ctx, c, w) },
		undid: func(before, after *appsv1.StatefulSet) bool {
			// The record changes with every restore; the spec did only if
			// its generation moved. (A restore of the record alone still
			// counts in the streak: see ensure.)
			return after.Generation != before.Generation || metadataDrift(before, desired) != ""
		},
		lock: statefulSetLock(decidedOn),
	}, restoring{streaks: restores, now: now})
	return existing, drift, err
}

// recordSpecWritten corrects the lull.dev/spec-written record of sts, the
// API server's response to lull's own write of its spec, when that write
// produced another generation than it claimed, or the claim names no UID
// (a create's: specWrittenClaim): a metadata-only patch, which moves no generation, so the record names the
// generation of lull's write even when another writer has changed the
// spec since (that writer's generation is then above it). The patch
// carries the StatefulSet's UID, so it cannot land on another object of
// its name.
func recordSpecWritten(ctx context.Context, c client.Client, sts *appsv1.StatefulSet) error {
	if generation, _, uid, ok := parseSpecWritten(sts.Annotations[lullv1.AnnotationSpecWritten]); ok && generation == sts.Generation && uid == sts.UID {
		return nil
	}
	value := formatSpecWritten(sts.Generation, sts.Annotations[render.AnnotationSpecHash], sts.UID)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": sts.UID,
		"annotations": map[string]string{lullv1.AnnotationSpecWritten: value}}})
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, sts, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(lullv1.FieldManagerController)); err != nil {
		return fmt.Errorf("record lull's write of StatefulSet %s at generation %d: %w", sts.Name, sts.Generation, err)
	}
	return nil
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
