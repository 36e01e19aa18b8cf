package rollout

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
	"lull.dev/lull/internal/lifecycle"
)

// manualRequest returns the Manual drain request of a suspension: the
// outstanding one if it is for this pod, or a new one.
func manualRequest(st lullv1.SessionStatus, pod types.UID, now time.Time) *lullv1.DrainRequest {
	if c := st.Drain; c != nil && c.PodUID == pod && c.Reason == lullv1.DrainReasonManual {
		return c.DeepCopy()
	}
	return newRequest(st, pod, lullv1.DrainReasonManual, now)
}

// decideSuspend drains a suspended session's pod before it goes: a healthy
// running pod gets a Manual drain request; once its runtime answers Drained
// the replacement is committed and Replicas scales the StatefulSet to zero.
// A pod that is failed or never started is committed at once, without a
// drain, and scaled away as well; force-update "true" commits a Forced
// replacement at once, and Replicas then scales the pod away.
func decideSuspend(o Observed, j lifecycle.Judgement) Action {
	s, pod := o.Session, o.Pod
	switch {
	case pod == nil && j.CullDue && j.Status.CullAction == lullv1.IdleDelete:
		return Action{Kind: DeleteSession, Reason: lullv1.ReasonIdleCull,
			Message: fmt.Sprintf("suspended session idle since %s, past idle.deleteAfter; deleting it", j.Status.IdleSince.UTC().Format(time.RFC3339))}
	case pod == nil:
		a := Action{Kind: Wait, Reason: lullv1.ReasonSuspended, Message: "session is suspended"}
		if !j.NextCheck.IsZero() {
			a.RequeueAfter = j.NextCheck.Sub(o.Now) + time.Second/10
		}
		return a
	case pod.DeletionTimestamp != nil:
		return terminating(o, "suspending: ")
	case Replicas(o) == 0:
		return Action{Kind: Wait, Reason: lullv1.ReasonSuspending, Drain: s.Status.Drain, Replacement: s.Status.Replacement,
			Message: fmt.Sprintf("suspending: scaling pod %s away", pod.Name)}
	}
	if a, ok := replaceUnserved(o, false); ok {
		a.Message = "suspending: " + a.Message
		return a
	}
	if s.Annotations[lullv1.AnnotationForceUpdate] == "true" {
		return commitCutShort(o, lullv1.ReplacementForced,
			fmt.Sprintf("suspending: %s=true: scaling pod %s away without waiting for a drain", lullv1.AnnotationForceUpdate, pod.Name))
	}
	want := manualRequest(s.Status, pod.UID, o.Now)
	switch {
	case s.Status.Drain == nil || s.Status.Drain.RequestID != want.RequestID:
		return Action{Kind: RequestDrain, Reason: lullv1.ReasonDrainRequested, Drain: want,
			Message: fmt.Sprintf("session suspended; asked the runtime of pod %s to drain first (request %s)", pod.Name, want.RequestID)}
	case drain.Answers(want, s.Status.Runtime, pod.UID):
		return commitDrained(o, fmt.Sprintf("suspending: runtime of pod %s reported Drained for request %s; scaling it away", pod.Name, want.RequestID))
	}
	return Action{Kind: Wait, Reason: lullv1.ReasonSuspending, Drain: s.Status.Drain,
		Message: fmt.Sprintf("suspending: waiting for the runtime of pod %s to drain (request %s)", pod.Name, want.RequestID)}
}

// Replicas is the replica count the session's StatefulSet must have: 1,
// or 0 for a suspended session whose pod is gone or terminating, or whose
// pod's replacement is committed, whatever its reason (Drained, Forced,
// PodFailed, NeverStarted). A suspended session's pod is never deleted at
// one replica: the StatefulSet controller would recreate it from its pod
// template at once (onto an image the catalog may refuse) unless lull's
// next reconcile scaled it to zero first. Scaling to zero is a
// destructive step like a delete, so neither a Drained report nor
// lull.dev/force-update alone ever scales away: the commitment, a
// compare-and-swap on the Session version they were seen in, does.
func Replicas(o Observed) int32 {
	s, pod := o.Session, o.Pod
	if !s.Spec.Suspend {
		return 1
	}
	if pod == nil || pod.DeletionTimestamp != nil {
		return 0
	}
	if c := s.Status.Replacement; c != nil && c.PodUID == pod.UID {
		return 0
	}
	return 1
}
