// Package rollout decides, from what the controller observed of one session,
// the single next step that moves it toward its template's update revision.
// Everything here is a pure function of its inputs: no API calls, no clock
// reads. The session reconciler gathers the objects, calls Decide, executes
// the Action and writes the status NextStatus computes.
package rollout

import (
	"fmt"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
)

// Observed is everything Decide looks at. Nil StatefulSet or Pod means the
// object does not exist (or is not yet in the cache).
type Observed struct {
	// Now is the reconcile time; it stamps new drain requests and measures
	// backoff.
	Now time.Time
	// Session is the session being reconciled, its annotations and status
	// (drain request, runtime report, replacement backoff) included.
	Session *lullv1.Session
	// Strategy is the template's update strategy; empty means Drain.
	Strategy lullv1.UpdateStrategy
	// StatefulSet is the session's StatefulSet.
	StatefulSet *appsv1.StatefulSet
	// Pod is the StatefulSet's only pod, ordinal 0.
	Pod *corev1.Pod
}

// Kind is what the reconciler must do.
type Kind string

// The kinds of Action.
const (
	// Wait: nothing to do now. Requeue after RequeueAfter if it is set;
	// otherwise a watch event brings the next step.
	Wait Kind = "Wait"
	// RequestDrain: write Action.Drain into status.drain.
	RequestDrain Kind = "RequestDrain"
	// DeletePod: delete the pod with UID PodUID, with a UID precondition.
	DeletePod Kind = "DeletePod"
)

// Reasons are machine-readable CamelCase words used in conditions and Events.
const (
	ReasonSuspended          = "Suspended"
	ReasonSuspending         = "Suspending"
	ReasonStatefulSetPending = "StatefulSetPending"
	ReasonRevisionUnknown    = "RevisionUnknown"
	ReasonPodPending         = "PodPending"
	ReasonPodTerminating     = "PodTerminating"
	ReasonPodStarting        = "PodStarting"
	ReasonUpToDate           = "UpToDate"
	ReasonPodFailed          = "PodFailed"
	ReasonReplacementBackoff = "ReplacementBackoff"
	ReasonForced             = "Forced"
	ReasonDrainRequested     = "DrainRequested"
	ReasonDraining           = "Draining"
	ReasonDrained            = "Drained"
)

// Action is Decide's answer: one step, and the drain request status.drain
// must hold once the step is done.
type Action struct {
	Kind Kind
	// Reason is a machine-readable word (one of the Reason constants).
	Reason string
	// Message says the same for a human.
	Message string
	// Drain is the drain request status.drain must hold after this step;
	// nil clears it.
	Drain *lullv1.DrainRequest
	// PodUID is the UID precondition of DeletePod.
	PodUID types.UID
	// PodFailed marks a DeletePod of a failed pod; it counts toward the
	// replacement backoff.
	PodFailed bool
	// RequeueAfter, when non-zero, asks for another look after that long.
	RequeueAfter time.Duration
}

// Decide returns the next step for one session. The rules, in order:
//
//  1. A suspended session drains its pod before it is scaled to zero (see
//     decideSuspend and Replicas). A session whose StatefulSet or pod does
//     not exist yet waits; a pod being deleted is waited for.
//  2. Staleness comes only from revisions: the pod's controller-revision-hash
//     label against the StatefulSet's status.updateRevision, and only once
//     status.observedGeneration >= metadata.generation and updateRevision is
//     set. Pod specs are never compared (admission webhooks rewrite images).
//  3. A current pod is never deleted, even when it keeps failing.
//  4. A stale pod that is terminal or whose container cannot start is
//     replaced at once, subject to an exponential backoff between failed
//     replacements.
//  5. lull.dev/force-update ("true", or the exact request ID) replaces a
//     stale pod without a drain.
//  6. Drain: request a drain of the pod; delete it only once its runtime
//     reports Drained for that request ID from that pod UID.
func Decide(o Observed) Action {
	s := o.Session
	current := s.Status.Drain
	if s.Spec.Suspend {
		return decideSuspend(o)
	}
	switch {
	case o.StatefulSet == nil:
		return Action{Kind: Wait, Reason: ReasonStatefulSetPending, Message: "waiting for the StatefulSet to be created"}
	}
	sts := o.StatefulSet
	if sts.Status.ObservedGeneration < sts.Generation || sts.Status.UpdateRevision == "" {
		return Action{Kind: Wait, Reason: ReasonRevisionUnknown, Drain: current,
			Message: fmt.Sprintf("waiting for the StatefulSet controller to observe generation %d and publish an update revision", sts.Generation)}
	}
	pod := o.Pod
	switch {
	case pod == nil:
		return Action{Kind: Wait, Reason: ReasonPodPending, Message: "waiting for the StatefulSet controller to create the pod"}
	case pod.DeletionTimestamp != nil:
		return Action{Kind: Wait, Reason: ReasonPodTerminating, Drain: current, Message: fmt.Sprintf("waiting for pod %s to terminate", pod.Name)}
	}
	update := sts.Status.UpdateRevision
	if PodRevision(pod) == update {
		return Action{Kind: Wait, Reason: ReasonUpToDate, Message: fmt.Sprintf("pod runs the update revision %s", update)}
	}

	if failed, why := PodFailure(pod); failed {
		if wait := backoffRemaining(s.Status, o.Now); wait > 0 {
			return Action{Kind: Wait, Reason: ReasonReplacementBackoff, Drain: current, RequeueAfter: wait,
				Message: fmt.Sprintf("stale pod %s has failed (%s); replacing it in %s (backoff after %d failed replacements)", pod.Name, why, wait.Round(time.Second), s.Status.FailedReplacements)}
		}
		return Action{Kind: DeletePod, Reason: ReasonPodFailed, PodUID: pod.UID, PodFailed: true, Drain: current,
			Message: fmt.Sprintf("stale pod %s has failed (%s); replacing it without a drain", pod.Name, why)}
	}

	want := updateRequest(pod.UID, update, current, o.Now)
	if force := s.Annotations[lullv1.AnnotationForceUpdate]; force == "true" || (force != "" && force == want.RequestID) {
		return Action{Kind: DeletePod, Reason: ReasonForced, PodUID: pod.UID, Drain: want,
			Message: fmt.Sprintf("%s=%s: replacing stale pod %s without waiting for a drain", lullv1.AnnotationForceUpdate, force, pod.Name)}
	}

	switch {
	case current == nil || current.RequestID != want.RequestID:
		return Action{Kind: RequestDrain, Reason: ReasonDrainRequested, Drain: want,
			Message: fmt.Sprintf("pod %s runs revision %s; asked its runtime to drain for revision %s (request %s)", pod.Name, PodRevision(pod), update, want.RequestID)}
	case drain.Answers(current, s.Status.Runtime, pod.UID):
		return Action{Kind: DeletePod, Reason: ReasonDrained, PodUID: pod.UID, Drain: current,
			Message: fmt.Sprintf("runtime of pod %s reported Drained for request %s; replacing the pod", pod.Name, current.RequestID)}
	default:
		return Action{Kind: Wait, Reason: ReasonDraining, Drain: current,
			Message: fmt.Sprintf("waiting for the runtime of pod %s to drain (request %s)", pod.Name, current.RequestID)}
	}
}

// updateRequest returns the Update drain request for a pod and target
// revision. It keeps the time of an identical request already outstanding,
// so a recomputed request is byte-for-byte the one in status.
func updateRequest(pod types.UID, revision string, current *lullv1.DrainRequest, now time.Time) *lullv1.DrainRequest {
	id := drain.RequestID(pod, lullv1.DrainReasonUpdate, revision)
	if current != nil && current.RequestID == id {
		return current.DeepCopy()
	}
	return &lullv1.DrainRequest{
		RequestID:   id,
		PodUID:      pod,
		Reason:      lullv1.DrainReasonUpdate,
		Revision:    revision,
		RequestedAt: metav1.NewTime(now.Truncate(time.Second)),
	}
}

// PodRevision returns the StatefulSet revision a pod was created from: its
// controller-revision-hash label.
func PodRevision(pod *corev1.Pod) string {
	return pod.Labels[appsv1.ControllerRevisionHashLabelKey]
}

// decideSuspend drains a suspended session's pod before it goes: a healthy
// running pod gets a Manual drain request, and Replicas scales the
// StatefulSet to zero once the runtime has answered Drained (or the pod has
// failed, or force-update is "true"). The request's episode is the session
// generation that asked for the suspension, so suspending again later is a
// new request.
func decideSuspend(o Observed) Action {
	s, pod := o.Session, o.Pod
	switch {
	case pod == nil:
		return Action{Kind: Wait, Reason: ReasonSuspended, Message: "session is suspended"}
	case pod.DeletionTimestamp != nil:
		return Action{Kind: Wait, Reason: ReasonPodTerminating, Drain: s.Status.Drain, Message: fmt.Sprintf("suspending: waiting for pod %s to terminate", pod.Name)}
	}
	if Replicas(o) == 0 {
		return Action{Kind: Wait, Reason: ReasonSuspending, Drain: s.Status.Drain, Message: fmt.Sprintf("suspending: scaling pod %s away", pod.Name)}
	}
	want := manualRequest(pod.UID, s.Generation, s.Status.Drain, o.Now)
	if s.Status.Drain == nil || s.Status.Drain.RequestID != want.RequestID {
		return Action{Kind: RequestDrain, Reason: ReasonDrainRequested, Drain: want,
			Message: fmt.Sprintf("session suspended; asked the runtime of pod %s to drain first (request %s)", pod.Name, want.RequestID)}
	}
	return Action{Kind: Wait, Reason: ReasonSuspending, Drain: s.Status.Drain,
		Message: fmt.Sprintf("suspending: waiting for the runtime of pod %s to drain (request %s)", pod.Name, want.RequestID)}
}

// Replicas is the replica count the session's StatefulSet must have: 1,
// or 0 for a suspended session whose pod is gone, terminating, failed,
// forced ("true"), or whose runtime has answered the suspension's drain
// request.
func Replicas(o Observed) int32 {
	s, pod := o.Session, o.Pod
	if !s.Spec.Suspend {
		return 1
	}
	if pod == nil || pod.DeletionTimestamp != nil || s.Annotations[lullv1.AnnotationForceUpdate] == "true" {
		return 0
	}
	if failed, _ := PodFailure(pod); failed {
		return 0
	}
	want := drain.RequestID(pod.UID, lullv1.DrainReasonManual, strconv.FormatInt(s.Generation, 10))
	if d := s.Status.Drain; d != nil && d.RequestID == want && drain.Answers(d, s.Status.Runtime, pod.UID) {
		return 0
	}
	return 1
}

func manualRequest(pod types.UID, generation int64, current *lullv1.DrainRequest, now time.Time) *lullv1.DrainRequest {
	id := drain.RequestID(pod, lullv1.DrainReasonManual, strconv.FormatInt(generation, 10))
	if current != nil && current.RequestID == id {
		return current.DeepCopy()
	}
	return &lullv1.DrainRequest{RequestID: id, PodUID: pod, Reason: lullv1.DrainReasonManual, RequestedAt: metav1.NewTime(now.Truncate(time.Second))}
}
