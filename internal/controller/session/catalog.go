package session

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/catalog"
	"lull.dev/lull/internal/render"
)

// ImageGate is what the catalog lets the session reconciler do with a
// session's StatefulSet. The zero value lets it render as usual.
type ImageGate struct {
	// Hold keeps the StatefulSet's pod template as it is (only its
	// replicas follow the rollout): the template's runtime image is not
	// allowed, and under OnDelete a pod the StatefulSet controller creates
	// (after a node loss, an eviction, a resume) would run whatever
	// template the StatefulSet holds.
	Hold bool
	// Block creates no pod at all: there is no StatefulSet yet (a new
	// session), or a suspended session would resume on an image that is
	// not allowed either. The session shows reason ImageNotAllowed.
	Block bool
	// Message says which image, why, and what to do.
	Message string
}

// GateImage decides, from the catalog (nil: none), the template, the
// session's StatefulSet as it is (nil: none yet) and the replicas the
// rollout wants, whether the StatefulSet may carry the template's runtime
// image. A running session is never stopped: its StatefulSet is only kept
// from moving to an image the catalog does not list. A StatefulSet that
// already carries that image (written while it was allowed) is left as it
// is, except that one scaled to zero is not resumed onto an image the
// catalog does not list.
func GateImage(cat *lullv1.RuntimeCatalog, t *lullv1.SessionTemplate, sts *appsv1.StatefulSet, replicas int32) ImageGate {
	rt := t.RuntimeContainer()
	if rt == nil {
		return ImageGate{} // rendering refuses it (RenderFailed)
	}
	ok, why := catalog.Allowed(cat, t.Namespace, rt.Image)
	if ok {
		return ImageGate{}
	}
	msg := fmt.Sprintf("SessionTemplate %s runs %s: %s", t.Name, rt.Image, why)
	if sts == nil {
		return ImageGate{Block: true, Message: msg + "; no pod is created for this session until the catalog lists the image or the template names one it lists (`lull catalog`)"}
	}
	held := runtimeImage(sts)
	// A resume starts a new pod from what the StatefulSet holds. Judged
	// before the "already carries it" case below: a StatefulSet written
	// with the template's image while it was allowed, then suspended,
	// holds exactly the image the catalog now refuses, and resuming it
	// would start a pod on it.
	if ptr.Deref(sts.Spec.Replicas, 1) == 0 && replicas > 0 {
		if ok, _ := catalog.Allowed(cat, t.Namespace, held); !ok {
			if held == rt.Image {
				return ImageGate{Block: true, Message: msg + "; its StatefulSet holds that image, so the session does not resume until the catalog lists it or the template names an image it lists (`lull catalog`)"}
			}
			return ImageGate{Block: true, Message: msg + fmt.Sprintf("; its last image %s is not allowed either, so the session does not resume until the catalog lists one of them (`lull catalog`)", held)}
		}
	}
	if held == rt.Image {
		return ImageGate{}
	}
	return ImageGate{Hold: true, Message: msg + fmt.Sprintf("; the session keeps %s and is not updated until the catalog lists the image or the template names one it lists (`lull catalog`)", held)}
}

// runtimeImage is the image of the runtime container of a StatefulSet's
// pod template; "" when it has none.
func runtimeImage(sts *appsv1.StatefulSet) string {
	return containerImage(sts.Spec.Template.Spec.Containers)
}

// containerImage is the image of the runtime container among cs; "" when
// there is none.
func containerImage(cs []corev1.Container) string {
	for _, c := range cs {
		if c.Name == lullv1.RuntimeContainerName {
			return c.Image
		}
	}
	return ""
}

// gateImage reads the catalog and the session's StatefulSet from the
// cache and decides with GateImage.
func (r *Reconciler) gateImage(ctx context.Context, s *lullv1.Session, t *lullv1.SessionTemplate, replicas int32) (ImageGate, error) {
	cat, err := catalog.Read(ctx, r.Client)
	if err != nil {
		return ImageGate{}, err
	}
	sts := &appsv1.StatefulSet{}
	switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.Name}, sts); {
	case apierrors.IsNotFound(err):
		sts = nil
	case err != nil:
		return ImageGate{}, err
	case !metav1.IsControlledBy(sts, s):
		return ImageGate{}, nil // ensureStatefulSet refuses it (NameConflict)
	}
	return GateImage(cat, t, sts, replicas), nil
}

// hold keeps the session's StatefulSet during a catalog hold (ImageGate
// Hold). lull's own spec (writtenBy) keeps its pod template and follows
// the rollout's replicas only (holdStatefulSet). One another writer
// changed is restored first, as every reconcile restores it
// (ensureStatefulSet: the drift is returned for a DriftCorrected Event,
// restores are spaced, errRestoreDeferred), to lull's own last write,
// which heldTemplate finds among the image the StatefulSet holds and the
// one the session's pod (nil: none) was created with. When neither
// renders lull's last write, it returns errHeldForeign: no step is taken
// on that spec.
func (r *Reconciler) hold(ctx context.Context, s *lullv1.Session, t *lullv1.SessionTemplate, pod *corev1.Pod, replicas int32, decidedOn string, now time.Time) (*appsv1.StatefulSet, string, error) {
	sts := &appsv1.StatefulSet{}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(s), sts); err != nil {
		return nil, "", err
	}
	edit, _ := writtenBy(sts)
	if edit == "" {
		sts, err := holdStatefulSet(ctx, r.Client, r.reader(), s, replicas, decidedOn)
		return sts, "", err
	}
	images := []string{runtimeImage(sts)}
	if pod != nil {
		images = append(images, containerImage(pod.Spec.Containers))
	}
	held := heldTemplate(s, t, sts, images)
	if held == nil {
		return nil, "", errHeldForeign{name: sts.Name, edit: edit}
	}
	return ensureStatefulSet(ctx, r.Client, r.reader(), s, held, replicas, decidedOn, now, &r.restores)
}

// heldTemplate returns t with its runtime container's image set to the
// first of images ("" skipped) whose rendering of s carries the spec-hash
// of lull's own last write of sts, as its lull.dev/spec-written record
// names it (at either replica count: a hold's scaling keeps the spec-hash
// it found). That is the template of lull's last write when the
// SessionTemplate has changed only its runtime image since, the change
// the catalog holds back. nil when none is: sts has no record, or the
// template changed more than its image, and lull cannot tell its own
// spec.
func heldTemplate(s *lullv1.Session, t *lullv1.SessionTemplate, sts *appsv1.StatefulSet, images []string) *lullv1.SessionTemplate {
	_, want, _, ok := parseSpecWritten(sts.Annotations[lullv1.AnnotationSpecWritten])
	if !ok || t.RuntimeContainer() == nil {
		return nil
	}
	for _, image := range images {
		if image == "" {
			continue
		}
		held := t.DeepCopy()
		held.RuntimeContainer().Image = image
		for _, replicas := range []int32{1, 0} {
			if r, err := render.StatefulSet(s, held, replicas); err == nil && r.Annotations[render.AnnotationSpecHash] == want {
				return held
			}
		}
	}
	return nil
}

// errHeldForeign is a StatefulSet held by the catalog that another
// writer changed (edit) in a way lull cannot undo: no image at hand
// renders lull's own last write of it (heldTemplate).
type errHeldForeign struct{ name, edit string }

func (e errHeldForeign) Error() string {
	return fmt.Sprintf("StatefulSet %s: %s, and lull cannot restore its own spec while the catalog holds the session, as no image it can see renders it; no step is taken on that spec until the catalog lists the template's image or the StatefulSet is deleted, to be created anew", e.name, e.edit)
}

// imageRefused says why the catalog (nil: none) refuses the runtime image
// of sts's pod template ("StatefulSet <name> runs <image>: <why>"), for
// rollout.Observed.ImageRefused; "" when it allows it.
func imageRefused(cat *lullv1.RuntimeCatalog, sts *appsv1.StatefulSet) string {
	image := runtimeImage(sts)
	if ok, why := catalog.Allowed(cat, sts.Namespace, image); !ok {
		return fmt.Sprintf("StatefulSet %s runs %s: %s", sts.Name, image, why)
	}
	return ""
}

// holdStatefulSet leaves the session's StatefulSet's pod template as it is
// and sets only its replicas (a suspension still scales it to zero). A
// scale-down lands only on decidedOn, the version the reconcile read
// before deciding (see ensureStatefulSet). A change of replicas is a
// change of the spec, which moves the generation: over lull's own spec
// (writtenBy) the write records the generation it produces (claimed low,
// then corrected from the response: recordSpecWritten), and lands
// only on the copy it was computed against (lockedPatch); over another
// writer's it records nothing, and the StatefulSet stays another
// writer's. A resume (the cache shows zero replicas) is judged on the
// API server's copy, read through live, and the catalog there
// (confirmWrite: a 409 when it refuses the image the copy holds), and
// lands only on that copy.
func holdStatefulSet(ctx context.Context, c client.Client, live client.Reader, s *lullv1.Session, replicas int32, decidedOn string) (*appsv1.StatefulSet, error) {
	sts := &appsv1.StatefulSet{}
	key := client.ObjectKey{Namespace: s.Namespace, Name: s.Name}
	if err := c.Get(ctx, key, sts); err != nil {
		return nil, err
	}
	have := ptr.Deref(sts.Spec.Replicas, 1)
	if have == replicas {
		return sts, nil
	}
	resume := raisesFromZero(sts, replicas)
	if resume {
		if err := live.Get(ctx, key, sts); err != nil {
			return nil, err
		}
		scaled := sts.DeepCopy()
		scaled.Spec.Replicas = &replicas
		if err := confirmWrite(ctx, live, sts, scaled); err != nil {
			return nil, err
		}
		if have = ptr.Deref(sts.Spec.Replicas, 1); have == replicas {
			return sts, nil
		}
	}
	own, _ := writtenBy(sts)
	patch := client.MergeFrom(sts.DeepCopy())
	var err error
	switch {
	case replicas < have:
		patch, err = lockedPatch(sts, "StatefulSet", decidedOn)
	case own == "" || resume:
		patch, err = lockedPatch(sts, "StatefulSet", sts.ResourceVersion)
	}
	if err != nil {
		return nil, err
	}
	if own == "" {
		// The lowest generation the write can produce (specWrittenClaim);
		// the response corrects it.
		sts.Annotations[lullv1.AnnotationSpecWritten] = formatSpecWritten(sts.Generation, sts.Annotations[render.AnnotationSpecHash], sts.UID)
	}
	sts.Spec.Replicas = &replicas
	if err := c.Patch(ctx, sts, patch, client.FieldOwner(lullv1.FieldManagerController)); err != nil {
		return nil, fmt.Errorf("scale StatefulSet %s: %w", sts.Name, err)
	}
	if own == "" {
		if err := recordSpecWritten(ctx, c, sts); err != nil {
			return nil, err
		}
	}
	return sts, nil
}

// holdConditions says, on a session whose StatefulSet is held, that it is
// not up to date because of the catalog (UpToDate False, reason
// ImageNotAllowed), whatever its pod's revision against the held
// StatefulSet says.
func holdConditions(conditions *[]metav1.Condition, generation int64, msg string, now time.Time) {
	// The transition time is the reconcile's clock, as every other
	// condition's (rollout.NextStatus), not the wall clock SetStatusCondition
	// would use.
	meta.SetStatusCondition(conditions, metav1.Condition{Type: lullv1.ConditionUpToDate, Status: metav1.ConditionFalse,
		Reason: lullv1.ReasonImageNotAllowed, Message: msg, ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now)})
}
