// Confirming a step that makes a pod against the API server: the rollout
// and the catalog's gate decide on the StatefulSet and the catalog as the
// cache shows them, and the StatefulSet controller creates a pod (a
// replaced pod's successor, a resumed session's pod) from the StatefulSet
// as the API server holds it.

package session

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"lull.dev/lull/internal/catalog"
	"lull.dev/lull/internal/rollout"
)

// destructive reports whether carrying out a (execute) can have the
// StatefulSet controller create a pod: a commitment, which a delete of
// the pod follows at once or in a later step (rollout.Decide finishes
// committed replacements), a pod's delete, and its hand-off to its node's
// drain, which evicts it. Every other step writes
// only the session's status, or scales the StatefulSet down or the
// session away.
func destructive(a rollout.Action) bool {
	return a.Kind == rollout.Commit || a.Kind == rollout.DeletePod || a.Kind == rollout.HandOff
}

// confirmStatefulSet reads the session's StatefulSet and the catalog from
// the API server and says how they differ from what the step observed in
// o was decided on (statefulSetMoved); "" when they do not. Two GETs,
// made only before a destructive step.
func (r *Reconciler) confirmStatefulSet(ctx context.Context, o rollout.Observed) (string, error) {
	cat, err := catalog.Read(ctx, r.reader())
	if err != nil {
		return "", err
	}
	live := &appsv1.StatefulSet{}
	refused := ""
	switch err := r.reader().Get(ctx, client.ObjectKeyFromObject(o.Session), live); {
	case apierrors.IsNotFound(err):
		live = nil
	case err != nil:
		return "", fmt.Errorf("confirm StatefulSet %s before the step: %w", o.Session.Name, err)
	default:
		refused = imageRefused(cat, live)
	}
	return statefulSetMoved(o.StatefulSet, o.ImageRefused, live, refused), nil
}

// statefulSetMoved describes how live, the session's StatefulSet as the
// API server holds it (nil: none), with liveRefused, the catalog's
// refusal of its runtime image as the API server holds the catalog
// (imageRefused), differs from decided and decidedRefused, the copy and
// refusal a step was decided on, in what the decision judges: the object
// (its UID), its spec (generation), whose spec it is (writtenBy: lull's
// record against the generation and spec-hash) and whether the catalog
// refuses its image. "" when it does not: the successor the StatefulSet
// controller creates is the one the decision saw.
func statefulSetMoved(decided *appsv1.StatefulSet, decidedRefused string, live *appsv1.StatefulSet, liveRefused string) string {
	switch {
	case decided == nil && live == nil:
		return ""
	case live == nil:
		return fmt.Sprintf("StatefulSet %s is gone on the API server", decided.Name)
	case decided == nil:
		return fmt.Sprintf("StatefulSet %s exists on the API server, and the step was decided on none", live.Name)
	case live.UID != decided.UID:
		return fmt.Sprintf("StatefulSet %s is UID %s on the API server, and the step was decided on UID %s", live.Name, live.UID, decided.UID)
	case live.Generation != decided.Generation:
		return fmt.Sprintf("StatefulSet %s is at generation %d on the API server, and the step was decided on generation %d", live.Name, live.Generation, decided.Generation)
	}
	liveEdit, _ := writtenBy(live)
	if decidedEdit, _ := writtenBy(decided); liveEdit != decidedEdit {
		if liveEdit == "" {
			return fmt.Sprintf("StatefulSet %s holds lull's own spec on the API server, and the step was decided on another writer's (%s)", live.Name, decidedEdit)
		}
		return fmt.Sprintf("StatefulSet %s on the API server: %s", live.Name, liveEdit)
	}
	if liveRefused != decidedRefused {
		if liveRefused == "" {
			return fmt.Sprintf("the catalog on the API server allows the runtime image of StatefulSet %s, and the step was decided on its refusal (%s)", live.Name, decidedRefused)
		}
		return "on the API server, " + liveRefused
	}
	return ""
}

// raisesFromZero reports whether a write that leaves a StatefulSet at
// replicas over live, the API server's copy of it (nil: none, the write
// creates it), has the StatefulSet controller create a pod where none
// runs: a resume from zero replicas, or a create above zero.
func raisesFromZero(live *appsv1.StatefulSet, replicas int32) bool {
	return replicas > 0 && (live == nil || ptr.Deref(live.Spec.Replicas, 1) == 0)
}

// changesImage reports whether a write that leaves a StatefulSet's pod
// template as written changes the runtime image of live, the API server's
// copy of it (nil: none, the write creates it): every pod the StatefulSet
// controller creates from then on (a replacement's successor, a pod
// recreated after an eviction or a node loss, a resume) runs written's
// image, and once the cache shows the write the catalog's gate finds the
// StatefulSet "already carries it" and holds nothing back.
func changesImage(live, written *appsv1.StatefulSet) bool {
	return live == nil || runtimeImage(live) != runtimeImage(written)
}

// judgedOnLiveCatalog reports whether a write that leaves a StatefulSet
// as written over live (nil: a create) is judged on the catalog as the
// API server holds it: one that changes its runtime image
// (changesImage), and one that raises it from zero replicas
// (raisesFromZero). A write of replicas alone to another count above
// zero, or down to zero, starts no pod on an image the StatefulSet did
// not already hold.
func judgedOnLiveCatalog(live, written *appsv1.StatefulSet) bool {
	return changesImage(live, written) || raisesFromZero(live, ptr.Deref(written.Spec.Replicas, 1))
}

// confirmWrite refuses, with a Conflict (the step is decided again), a
// write over live, the session's StatefulSet as the API server holds it
// (nil: the write creates it), that leaves it as written (its replicas
// and pod template), changes its runtime image or raises it from zero
// replicas (judgedOnLiveCatalog), when the catalog as the API server
// holds it (read through reader) refuses written's runtime image
// (imageRefused). The catalog's gate (GateImage) judged the write on
// cached copies of both, which may lag: a narrowing of the catalog not
// delivered yet (the gate then lets a new image through, or a hold's
// "already carries it" stands on an image written since), or a
// suspension's scale-down delivered only after the gate read the
// StatefulSet at one replica, where no resume is judged. Once the cache
// catches up, the gate holds the StatefulSet's template or blocks the
// session (ImageNotAllowed). One GET of the catalog, made only on such a
// write; an error reading it is returned as is.
func confirmWrite(ctx context.Context, reader client.Reader, live, written *appsv1.StatefulSet) error {
	if !judgedOnLiveCatalog(live, written) {
		return nil
	}
	cat, err := catalog.Read(ctx, reader)
	if err != nil {
		return fmt.Errorf("confirm the catalog before StatefulSet %s holds or runs image %s: %w", written.Name, runtimeImage(written), err)
	}
	if refused := imageRefused(cat, written); refused != "" {
		replicas := ptr.Deref(written.Spec.Replicas, 1)
		what := fmt.Sprintf("a write of its pod template at %d replicas would have the pods the StatefulSet controller creates run %s", replicas, runtimeImage(written))
		if raisesFromZero(live, replicas) {
			what = fmt.Sprintf("a write to %d replicas from 0 would start a pod", replicas)
		}
		return apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "statefulsets"}, written.Name,
			fmt.Errorf("%s, and on the API server %s", what, refused))
	}
	return nil
}
