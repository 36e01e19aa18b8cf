package session

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/catalog"
)

// +kubebuilder:rbac:groups=lull.dev,resources=runtimecatalogs,verbs=get;list;watch

// ReadCatalog returns RuntimeCatalog "default" from c (the manager's
// cache), or nil when there is none: then every image is allowed.
func ReadCatalog(ctx context.Context, c client.Reader) (*lullv1.RuntimeCatalog, error) {
	cat := &lullv1.RuntimeCatalog{}
	err := c.Get(ctx, client.ObjectKey{Name: lullv1.RuntimeCatalogName}, cat)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read RuntimeCatalog %q: %w", lullv1.RuntimeCatalogName, err)
	}
	return cat, nil
}

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
	for _, c := range sts.Spec.Template.Spec.Containers {
		if c.Name == lullv1.RuntimeContainerName {
			return c.Image
		}
	}
	return ""
}

// gateImage reads the catalog and the session's StatefulSet from the
// cache and decides with GateImage.
func (r *Reconciler) gateImage(ctx context.Context, s *lullv1.Session, t *lullv1.SessionTemplate, replicas int32) (ImageGate, error) {
	cat, err := ReadCatalog(ctx, r.Client)
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

// holdStatefulSet leaves the session's StatefulSet's pod template as it is
// and sets only its replicas (a suspension still scales it to zero).
func holdStatefulSet(ctx context.Context, c client.Client, s *lullv1.Session, replicas int32) (*appsv1.StatefulSet, error) {
	sts := &appsv1.StatefulSet{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.Name}, sts); err != nil {
		return nil, err
	}
	if ptr.Deref(sts.Spec.Replicas, 1) == replicas {
		return sts, nil
	}
	patch := client.MergeFrom(sts.DeepCopy())
	sts.Spec.Replicas = &replicas
	if err := c.Patch(ctx, sts, patch, client.FieldOwner(FieldManager)); err != nil {
		return nil, fmt.Errorf("scale StatefulSet %s: %w", sts.Name, err)
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
