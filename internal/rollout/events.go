package rollout

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Event is one Event the session controller records on a Session: its type
// (corev1.EventTypeNormal or corev1.EventTypeWarning), machine-readable
// reason, action (what the controller did: RequestDrain, Rollout, Render,
// Suspend, Resume, Cull, Report, DeletePod), note for a human, and related
// object (the session's pod; nil for none).
type Event struct {
	Type, Reason, Action, Note string
	Related                    *corev1.Pod
}

// Events returns the Events that follow the write of next, the status
// after step a, over the status of the session observed in o, in the order
// they are recorded. The session controller judges them from o as it read
// it, before the write, and records them only once that write has
// succeeded (a status that was already next costs no request and counts as
// written); a refused write records none. In order:
//
//  1. A blocked session (a Block step) whose UpToDate reason is new: a
//     Warning of that reason, action Render; none for FilesNotReady,
//     whose cause the template records once (its FilesReady condition).
//  2. The phase moving to Suspended (Suspended, action Suspend) or from it
//     (Resumed, action Resume): one per suspension and per resume, as
//     only one compare-and-swap write can change the phase, whoever makes
//     it.
//  3. An idle drain withdrawn (IdleCullWithdrawn, action Cull); a node
//     drain withdrawn, its node no longer disrupted (NodeDrain, action
//     NodeDrain).
//  4. The runtime newly not reporting (the Active condition's reason
//     becoming RuntimeNotReporting): a Warning with that condition's
//     message, action Report; another budget newly selecting the pod
//     beside lull's (BudgetsOverlap appearing): a Warning
//     OverlappingBudgets with its message, action NodeDrain; a claim
//     newly holding the pod on its disrupted node (PinnedToNode
//     appearing): a Warning VolumeNodeAffinity with its message, action
//     NodeDrain.
//  5. The step's own, at most one: a drain request (the step's reason,
//     action RequestDrain); the session up to date on a revision other
//     than the one its pod ran (Updated, action Rollout), not for a resume,
//     which has its own, nor before the session knew its update revision;
//     a pod newly stuck terminating or a drain newly overdue (a Warning of
//     that reason, action Rollout); a node drain newly waiting past its
//     deadline under onDrainTimeout Wait (a Warning NodeDrain, action
//     NodeDrain); the Forced commitment of a suspended
//     session's pod, which is scaled away rather than deleted (a Warning,
//     action Suspend, naming who forced it and why).
//
// A step carried out by another write (a pod deleted, an idle session
// suspended or deleted) has its own Event (StepEvent), recorded once that
// write has succeeded.
func Events(o Observed, next lullv1.SessionStatus, a Action) []Event {
	s, pod := o.Session, o.Pod
	before := s.Status
	var out []Event
	if a.Kind == Block && !hasConditionReason(s, lullv1.ConditionUpToDate, a.Reason) && a.Reason != lullv1.ReasonFilesNotReady {
		out = append(out, Event{Type: corev1.EventTypeWarning, Reason: a.Reason, Action: "Render", Note: a.Message})
	}
	switch {
	case before.Phase != lullv1.SessionSuspended && next.Phase == lullv1.SessionSuspended:
		out = append(out, Event{Type: corev1.EventTypeNormal, Reason: lullv1.ReasonSuspended, Action: "Suspend",
			Note: fmt.Sprintf("session suspended: its pod is gone, its claims (if any) kept; `lull resume %s` resumes it", s.Name)})
	case before.Phase == lullv1.SessionSuspended && next.Phase != lullv1.SessionSuspended:
		out = append(out, Event{Type: corev1.EventTypeNormal, Reason: lullv1.ReasonResumed, Action: "Resume",
			Note: "session resumed: a new pod starts on the update revision; its idle clock starts from the new pod's first report"})
	}
	if a.Reason == lullv1.ReasonIdleCullWithdrawn {
		out = append(out, Event{Type: corev1.EventTypeNormal, Reason: a.Reason, Action: "Cull", Note: a.Message, Related: pod})
	}
	if NodeDrainWithdrawn(o, a) {
		out = append(out, Event{Type: corev1.EventTypeNormal, Reason: lullv1.ReasonNodeDrain, Action: "NodeDrain", Note: a.Message, Related: pod})
	}
	if c := meta.FindStatusCondition(next.Conditions, lullv1.ConditionActive); c != nil && c.Reason == lullv1.ReasonRuntimeNotReporting &&
		!hasConditionReason(s, lullv1.ConditionActive, lullv1.ReasonRuntimeNotReporting) {
		out = append(out, Event{Type: corev1.EventTypeWarning, Reason: lullv1.ReasonRuntimeNotReporting, Action: "Report", Note: c.Message, Related: pod})
	}
	if c := meta.FindStatusCondition(next.Conditions, lullv1.ConditionBudgetsOverlap); c != nil && !meta.IsStatusConditionTrue(s.Status.Conditions, lullv1.ConditionBudgetsOverlap) {
		out = append(out, Event{Type: corev1.EventTypeWarning, Reason: lullv1.ReasonOverlappingBudgets, Action: "NodeDrain", Note: c.Message, Related: pod})
	}
	if c := meta.FindStatusCondition(next.Conditions, lullv1.ConditionPinnedToNode); c != nil && !meta.IsStatusConditionTrue(s.Status.Conditions, lullv1.ConditionPinnedToNode) {
		out = append(out, Event{Type: corev1.EventTypeWarning, Reason: lullv1.ReasonVolumeNodeAffinity, Action: "NodeDrain", Note: c.Message, Related: pod})
	}
	upToDate := meta.IsStatusConditionTrue(next.Conditions, lullv1.ConditionUpToDate)
	switch {
	case a.Kind == RequestDrain:
		out = append(out, Event{Type: corev1.EventTypeNormal, Reason: a.Reason, Action: "RequestDrain", Note: a.Message, Related: pod})
	case upToDate && !meta.IsStatusConditionTrue(before.Conditions, lullv1.ConditionUpToDate) && before.UpdateRevision != "" &&
		before.Phase != lullv1.SessionSuspended && // a resume has its own Event
		before.CurrentRevision != next.CurrentRevision: // a suspension taken back before its pod went updated nothing
		out = append(out, Event{Type: corev1.EventTypeNormal, Reason: lullv1.ReasonUpdated, Action: "Rollout", Note: a.Message, Related: pod})
	case (a.Reason == lullv1.ReasonPodStuckTerminating || a.Reason == lullv1.ReasonDrainOverdue) && !hasConditionReason(s, lullv1.ConditionUpToDate, a.Reason):
		out = append(out, Event{Type: corev1.EventTypeWarning, Reason: a.Reason, Action: "Rollout", Note: a.Message, Related: pod})
	case nodeDrainOverdue(o, a) && !hasConditionMessage(s, lullv1.ConditionDraining, a.Message):
		// Its message does not change while it waits: one Warning.
		out = append(out, Event{Type: corev1.EventTypeWarning, Reason: lullv1.ReasonNodeDrain, Action: "NodeDrain", Note: a.Message, Related: pod})
	case a.Kind == Commit && s.Spec.Suspend && a.Replacement != nil && a.Replacement.Reason == lullv1.ReplacementForced:
		out = append(out, Event{Type: corev1.EventTypeWarning, Reason: a.Reason, Action: "Suspend", Note: a.Message + forcedBy(o), Related: pod})
	}
	return out
}

// StepEvent returns the Event that follows step a of the session observed
// in o when the step is carried out by a write other than a status write,
// recorded once the API server has accepted that write:
//
//   - DeletePod (a Commit carried through, or a DeletePod): the pod
//     deleted, a Warning where turns may have been cut short (Forced,
//     naming who forced it and why; Replaced; DrainDeadlineExceeded),
//     Normal otherwise; the step's reason, action DeletePod.
//   - HandOff: the pod handed to its node's drain (labelled
//     lull.dev/drained), with the same types as DeletePod, action
//     HandOff: the node's drain, or lull after NodeDrainHandoff, deletes
//     it.
//   - SuspendSession: an idle session suspended (IdleSuspend, action Cull).
//   - DeleteSession: an idle session deleted (IdleDelete, action Cull).
//
// Each carries the step's message and the session's pod. ok is false for a
// step of any other kind: its Events follow its status write (Events).
func StepEvent(o Observed, a Action) (e Event, ok bool) {
	e = Event{Type: corev1.EventTypeNormal, Reason: a.Reason, Note: a.Message, Related: o.Pod}
	switch a.Kind {
	case DeletePod, HandOff:
		// A hand-off gives the pod to its node's drain, which deletes
		// it: it is the Event of the replacement as a delete is.
		e.Action = string(a.Kind)
		switch a.Reason {
		case lullv1.ReasonForced:
			e.Type, e.Note = corev1.EventTypeWarning, a.Message+forcedBy(o)
		case lullv1.ReasonReplaced, lullv1.ReasonDrainDeadlineExceeded:
			// Turns may have been cut short: say so where operators look.
			e.Type = corev1.EventTypeWarning
		}
	case SuspendSession:
		e.Reason, e.Action = lullv1.ReasonIdleSuspend, "Cull"
	case DeleteSession:
		e.Reason, e.Action = lullv1.ReasonIdleDelete, "Cull"
	default:
		return Event{}, false
	}
	return e, true
}

// forcedBy says who set the force annotation (o.ForcedBy) and why (the
// reason annotation), for the Events that record a forced replacement.
func forcedBy(o Observed) string {
	return fmt.Sprintf(" (set by %s; reason: %s)", cmpOr(o.ForcedBy, "unknown"),
		cmpOr(o.Session.Annotations[lullv1.AnnotationForceUpdateReason], "none given"))
}

func hasConditionMessage(s *lullv1.Session, typ, msg string) bool {
	c := meta.FindStatusCondition(s.Status.Conditions, typ)
	return c != nil && c.Message == msg
}
