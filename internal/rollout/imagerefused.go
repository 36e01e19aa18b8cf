package rollout

import (
	"fmt"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// withholdOnRefusedImage keeps a from starting a replacement of the
// session's pod while the catalog refuses the runtime image of the
// StatefulSet's pod template (o.ImageRefused): the StatefulSet controller
// would create the successor from that template, so lull's own delete
// would be a way around the allow-list, whoever put the image there.
//
// No replacement is committed and no drain that leads to one (Update,
// Lifetime, Manual) is requested; one outstanding is withdrawn, so a
// runtime that drained reopens, as its pod is not replaced. The session
// waits with reason ImageNotAllowed. What creates no pod goes on: an idle
// cull (its drain, and the commitment of its cull, CommitsCull: it
// suspends or deletes the session) and a suspension (Replicas
// scales every committed pod of a suspended session away).
//
// A replacement already committed (status.replacement), a cull's that is
// no longer due among them, is not finished by its delete while the image
// is refused: the StatefulSet, at one replica, would create the successor
// on that image. It is held instead, the pod kept and its commitment and
// drain request with it, and finished once the image is allowed or the
// StatefulSet holds one that is. Not withdrawn: a commitment never lapses
// (finishCommitted), as another controller may have its delete in flight,
// and a runtime that drained for it would reopen under that delete. Not
// scaled away: the replica count is decided before the StatefulSet the
// refusal is judged on is ensured (rollout.Replicas), and a scale-down of
// a session nobody suspended would have it resume, blocked by the
// catalog's gate, as a new pod anyway; the held pod keeps refusing turns,
// as its runtime already does.
func withholdOnRefusedImage(o Observed, a Action) Action {
	if o.ImageRefused == "" || o.Session.Spec.Suspend || o.Pod == nil {
		return a
	}
	switch {
	case a.Kind == DeletePod || a.Kind == HandOff || (a.Kind == Wait && a.Replacement != nil && HandedOff(o.Pod)):
		// A handed-off pod waiting for its evictor is held too: it is
		// taken back under its budget (TakesBackHandOff).
		return Action{Kind: Wait, Reason: lullv1.ReasonImageNotAllowed, Drain: a.Drain, Replacement: a.Replacement,
			Message: fmt.Sprintf("%s; the committed replacement of pod %s (%s) is held, as its successor would run that image, until the catalog lists it or the StatefulSet holds one it lists (`lull catalog`)", o.ImageRefused, o.Pod.Name, a.Reason)}
	case a.Kind != Commit && a.Kind != RequestDrain && (a.Kind != Wait || a.Drain == nil):
		return a
	case a.Kind != Commit && a.Replacement != nil:
		return a // committed already
	case a.Drain != nil && a.Drain.Reason == lullv1.DrainReasonIdle && (a.Kind != Commit || CommitsCull(a)):
		// The idle drain itself, and the commitment of its cull. Any other
		// commitment made while an idle drain is outstanding (a failed or
		// never-started pod, a force-update) is a replacement like any
		// other: its delete has the StatefulSet create the successor.
		return a
	}
	return Action{Kind: Wait, Reason: lullv1.ReasonImageNotAllowed,
		Message: fmt.Sprintf("%s; pod %s is not replaced, as its successor would run that image, until the catalog lists it or the StatefulSet holds one it lists (`lull catalog`)", o.ImageRefused, o.Pod.Name)}
}

// CommitsCull reports whether a commits an idle cull: the replacement of a
// pod whose runtime answered its Idle drain request. Its pod goes with the
// session, suspended (the StatefulSet scaled to zero) or deleted, and no
// successor is created from the StatefulSet's template; every other Commit
// is finished by deleting the pod, after which the StatefulSet controller
// creates its successor.
func CommitsCull(a Action) bool {
	return a.Kind == Commit && a.Drain != nil && a.Drain.Reason == lullv1.DrainReasonIdle &&
		a.Replacement != nil && a.Replacement.Reason == lullv1.ReplacementDrained && a.Replacement.RequestID == a.Drain.RequestID
}
