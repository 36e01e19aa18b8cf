// Package rollout decides, from what the controller observed of one session,
// the single next step that moves it toward its template's update revision,
// and, from a template's sessions, the template's status: its counts, the
// brake, the wave of sessions admitted to move, the expected completion and
// the conditions. Everything here is a pure function of its inputs: no API
// calls, no clock reads. The session reconciler gathers the objects, calls
// Decide, executes the Action and writes the status NextStatus computes;
// the template reconciler gathers a template's sessions and writes the
// status NextTemplateStatus computes.
package rollout

import (
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
	"lull.dev/lull/internal/lifecycle"
)

// Observed is everything Decide looks at, and NextStatus and Events after
// it. Nil StatefulSet or Pod means the object does not exist (or is not yet
// in the cache).
type Observed struct {
	// Now is the reconcile time; it stamps new drain requests and measures
	// backoff.
	Now time.Time
	// Session is the session being reconciled, its annotations and status
	// (drain request, runtime report, replacement backoff) included.
	Session *lullv1.Session
	// Policy is the template's update policy; an empty strategy means
	// Drain.
	Policy lullv1.UpdatePolicy
	// StatefulSet is the session's StatefulSet.
	StatefulSet *appsv1.StatefulSet
	// Pod is the StatefulSet's only pod, ordinal 0.
	Pod *corev1.Pod
	// Admitted: the template's wave holds a place for the session's next
	// Update drain request (see Admitted). Without it, a stale session
	// waits (WaitingForWave) instead of issuing one.
	Admitted bool
	// Lifecycle is the session's idle policy and maximum lifetime.
	Lifecycle lifecycle.Policy
	// ReportWrittenAt is when the API server last saw status.runtime
	// written (it shows the runtime's clock skew); see lifecycle.Observed.
	ReportWrittenAt time.Time
	// ForcedBy is the field manager that set lull.dev/force-update on the
	// session (the managed-fields entry that owns it; "" when none does):
	// the Events of a forced replacement name it.
	ForcedBy string
	// PendingClaims describes, one line each, the session's
	// PersistentVolumeClaims that keep its pod from starting (not created
	// yet, or Pending with the last warning about them); read only while
	// the session has no running pod.
	PendingClaims []string
	// ImageRefused, when not "", says why the catalog refuses the runtime
	// image of the StatefulSet's pod template ("StatefulSet <name> runs
	// <image>: <why>"): no replacement that the StatefulSet controller
	// would create from it is started (withholdOnRefusedImage).
	ImageRefused string
	// Quotas are the ResourceQuotas of the session's namespace, as the
	// cache holds them; read only to judge a refusal of the session's pod
	// (PodCreateRefusal), whose quota's scope says whose refusal it is.
	Quotas []corev1.ResourceQuota
	// Node is the node the pod runs on (its spec.nodeName) as the cache
	// holds it; nil when it is not known (not scheduled, not cached): not
	// disrupted, as far as lull can tell (NodeDisruption).
	Node *corev1.Node
	// NodeGone: the pod is bound to a node a live read of the API server
	// did not find (deleted; the cache alone never says so). Node is nil
	// then; NodeLost reads it.
	NodeGone bool
	// NodeDrain is the template's node drain policy (spec.nodeDrainPolicy);
	// empty fields take their defaults (NodeDrainPolicyOf).
	NodeDrain lullv1.NodeDrainPolicy
	// OverlappingBudgets names, sorted, the PodDisruptionBudgets other
	// than lull's that also select the pod (read only under strategy
	// Drain): the BudgetsOverlap condition names them.
	OverlappingBudgets []string
	// Pinned, when not nil, names the claim whose PersistentVolume holds
	// the pod on its node (PinnedTo); read only while the node is
	// disrupted under strategy Drain: the node drain does not apply
	// (decideNodeDrain) and the PinnedToNode condition says why.
	Pinned *Pin
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
	// Commit: write Action.Replacement into status.replacement with the
	// resourceVersion of the Session this decision was made on as a
	// precondition (a compare-and-swap), then delete the pod as DeletePod
	// does. From the commit on, the pod is replaced whoever acts next.
	// Every destructive step starts here, whatever its reason.
	Commit Kind = "Commit"
	// DeletePod: delete the pod with UID PodUID, with a UID precondition.
	// Decide returns it only for a pod whose replacement is already
	// committed (status.replacement names it).
	DeletePod Kind = "DeletePod"
	// SuspendSession: set the Session's spec.suspend to true, with the
	// resourceVersion of the Session this decision was made on as a
	// precondition (an idle cull whose drain is committed).
	SuspendSession Kind = "SuspendSession"
	// HandOff: label the pod with UID PodUID lull.dev/drained (with its
	// UID as a precondition in the patch) and stamp when, instead of
	// deleting it: its node is being drained, and the node's drain evicts
	// it once lull's budget no longer covers it (see handOff). Decide
	// returns it only for a pod whose replacement is already committed.
	HandOff Kind = "HandOff"
	// DeleteSession: delete the Session, with its UID and the
	// resourceVersion this decision was made on as preconditions, so a
	// session that became active or was edited in between is kept.
	DeleteSession Kind = "DeleteSession"
	// Block: nothing can be done until something the controller does not
	// watch changes (a missing template, an object the API server refuses;
	// see BlockedStatus, never Decide): write why, touch nothing running,
	// and look again after RequeueAfter, on the blocked schedule.
	Block Kind = "Block"
)

// Blocked reports whether a session's UpToDate reason means it cannot move
// until someone acts: a pod stuck terminating, a missing template, objects
// the API server refuses (lull's own, or the pod the StatefulSet controller
// would create), a name taken by an object lull does not own, a
// runtime image the RuntimeCatalog does not list, or template files whose
// ConfigMap cannot be created.
func Blocked(reason string) bool {
	switch reason {
	case lullv1.ReasonPodStuckTerminating, lullv1.ReasonTemplateNotFound, lullv1.ReasonRenderFailed, lullv1.ReasonNameConflict, lullv1.ReasonImageNotAllowed, lullv1.ReasonFilesNotReady,
		lullv1.ReasonPodCreateRefused, lullv1.ReasonPodQuotaExceeded, lullv1.ReasonQuotaExceeded, lullv1.ReasonAdmissionUnavailable:
		return true
	}
	return false
}

// StuckTerminatingAfter is how long past its deletion timestamp (which
// already includes the grace period) a pod may stay terminating before the
// session says it is stuck.
const StuckTerminatingAfter = 30 * time.Second

// Action is Decide's answer: one step, and the drain request and committed
// replacement status must hold once the step is done.
type Action struct {
	Kind Kind
	// Reason is a machine-readable word (one of the Reason constants).
	Reason string
	// Message says the same for a human.
	Message string
	// Drain is the drain request status.drain must hold after this step;
	// nil clears it.
	Drain *lullv1.DrainRequest
	// Replacement is what status.replacement must hold after this step;
	// nil clears it.
	Replacement *lullv1.Replacement
	// PodUID is the UID precondition of Commit and DeletePod.
	PodUID types.UID
	// RequeueAfter, when non-zero, asks for another look after that long.
	RequeueAfter time.Duration
	// HandOff, on a Commit, says the committed pod is handed to its node's
	// drain (as a HandOff step) instead of being deleted: its node is
	// being disrupted.
	HandOff bool
}

// Decide returns the next step for one session observed in o, whose
// lifecycle judgement j is Judge(o): the reconciler judges once per
// reconcile and hands the same judgement to Decide, to NextStatus and to
// its own look-again (j.NextCheck). The rules, in order:
//
//  1. A replacement committed for the session's pod (status.replacement)
//     is finished: the pod is deleted, whatever changed since. The
//     commitment and its drain request are never withdrawn, so the runtime
//     stays sealed and held. Every destructive step below is a Commit
//     first, whatever its reason: no pod is deleted that is not committed.
//  2. A suspended session drains its pod before it is scaled to zero (see
//     decideSuspend and Replicas). A session whose StatefulSet or pod does
//     not exist yet waits; a pod being deleted is waited for, and named as
//     stuck once it outlives its grace period by StuckTerminatingAfter.
//  3. Staleness comes only from revisions: the pod's controller-revision-hash
//     label against the StatefulSet's status.updateRevision, and only once
//     status.observedGeneration >= metadata.generation and updateRevision is
//     set. Pod specs are never compared (admission webhooks rewrite images).
//  4. A current pod is never deleted, even when it keeps failing.
//  5. A stale pod that is terminal, whose runtime container cannot start, or
//     whose runtime has never started is replaced without a drain, subject to
//     an exponential backoff between such replacements: the failure is
//     committed first (counting it), then the pod deleted. A pod whose
//     runtime container cannot start while its drain sidecar holds its
//     turns (SidecarHolds) is drained instead, at once, as rule 8 drains,
//     without waiting for the wave and under every strategy.
//  6. lull.dev/force-update ("true", or the exact request ID) replaces a
//     stale pod without a drain, committed first.
//  7. The template's update strategy: Passive leaves a healthy stale pod
//     alone (and withdraws an Update request it finds, unless committed);
//     Replace requests a drain whose deadline is now, then commits the
//     replacement and deletes the pod;
//     Drain goes on below.
//  8. Drain: once the template's wave has a place for it (maxUnavailable;
//     see PlanWave), request a drain of the pod with an ID never used before, with
//     the deadline of the template's drainTimeout if it has one; once its
//     runtime reports Drained for that request ID from that pod UID, commit
//     the replacement and delete the pod. Once the request's deadline has
//     passed, onDrainTimeout Replace commits the replacement and deletes
//     the pod; Wait keeps waiting, saying the drain is overdue.
//     8a. Node drains, before the lifecycle (rule 8's idle culls and lifetime
//     restarts) and the update of a stale pod, after a force and a failed
//     stale pod's replacement: a pod whose node is being disrupted
//     (NodeDisruption: cordoned, a drain's taint, DisruptionTarget), under
//     nodeDrainPolicy strategy Drain, is drained with reason NodeDrain
//     (or the request outstanding for it is reused), committed once
//     Drained or, with onDrainTimeout Replace, at the deadline, and handed
//     to the node's drain (HandOff) rather than deleted; a node no longer
//     disrupted withdraws the request (decideNodeDrain). Every committed
//     replacement of a pod on a disrupted node is handed off so, whatever
//     its reason, except a suspension's and an idle cull's, whose pod
//     gets no successor of its name.
//  9. Over all of these: while the catalog refuses the runtime image of
//     the StatefulSet's pod template (o.ImageRefused), no replacement the
//     StatefulSet controller would create from it is started, and no
//     drain leading to one is requested or left outstanding; the session
//     waits with reason ImageNotAllowed (withholdOnRefusedImage). An idle
//     cull (its drain and the commitment of the cull itself, not another
//     replacement committed under its drain) and a suspension go on; a committed replacement is held, not
//     finished by its delete, until the image is allowed.
func Decide(o Observed, j lifecycle.Judgement) Action {
	a := withholdOnRefusedImage(o, decideRules(o, j))
	_, disrupted := o.nodeDisrupted()
	if disrupted && a.Kind == Commit && !o.Session.Spec.Suspend && !CommitsCull(a) {
		a.HandOff = true
	}
	if disrupted && o.Pinned != nil && (a.RequeueAfter == 0 || a.RequeueAfter > PinnedRecheck) {
		a.RequeueAfter = PinnedRecheck
	}
	return a
}

// decideRules is Decide's rules 1 to 8.
func decideRules(o Observed, j lifecycle.Judgement) Action {
	s, pod := o.Session, o.Pod
	current := s.Status.Drain
	if a, ok := finishCommitted(o, j); ok {
		return a
	}
	if s.Spec.Suspend {
		return decideSuspend(o, j)
	}
	if o.StatefulSet == nil {
		return Action{Kind: Wait, Reason: lullv1.ReasonStatefulSetPending, Message: "waiting for the StatefulSet to be created"}
	}
	sts := o.StatefulSet
	if sts.Status.ObservedGeneration < sts.Generation || sts.Status.UpdateRevision == "" {
		return Action{Kind: Wait, Reason: lullv1.ReasonRevisionUnknown, Drain: current,
			Message: fmt.Sprintf("waiting for the StatefulSet controller to observe generation %d and publish an update revision", sts.Generation)}
	}
	switch {
	case pod == nil:
		return Action{Kind: Wait, Reason: lullv1.ReasonPodPending, Message: "waiting for the StatefulSet controller to create the pod"}
	case pod.DeletionTimestamp != nil:
		return terminating(o, "")
	}
	update := sts.Status.UpdateRevision
	if PodRevision(pod) == update {
		if a, ok := decideNodeDrain(o); ok {
			return a
		}
		if a, ok := decideLifecycle(o, j, false); ok {
			return a
		}
		return Action{Kind: Wait, Reason: lullv1.ReasonUpToDate, Message: upToDateMessage(pod, update)}
	}

	if a, ok := replaceUnserved(o, true); ok {
		return a
	}

	want := updateRequest(s.Status, pod.UID, update, o.Now, o.Policy)
	if force := s.Annotations[lullv1.AnnotationForceUpdate]; force == "true" || (force != "" && force == want.RequestID) {
		return commitCutShort(o, lullv1.ReplacementForced,
			fmt.Sprintf("%s=%s: replacing stale pod %s without waiting for a drain", lullv1.AnnotationForceUpdate, force, pod.Name))
	}
	if a, ok := decideNodeDrain(o); ok {
		return a
	}
	if a, ok := decideLifecycle(o, j, true); ok {
		return a
	}
	// A failed pod whose drain sidecar holds its turns is replaced at once,
	// as a failed pod is, only through a drain: neither the wave nor
	// Passive holds it back.
	failed := o.drainsFirst()
	if o.Policy.Strategy == lullv1.UpdateStrategyPassive && !failed {
		// An Update request left from another strategy, the Manual
		// request of a suspension taken back, or a lifecycle request for
		// an earlier pod is withdrawn: the runtime reopens. Its Drained
		// report, if any, answers nothing.
		return Action{Kind: Wait, Reason: lullv1.ReasonUpdatePending,
			Message: fmt.Sprintf("pod %s runs revision %s; the update to revision %s waits until the pod is replaced for another reason (strategy Passive)", pod.Name, PodRevision(pod), update)}
	}

	switch {
	case (current == nil || current.RequestID != want.RequestID) && !o.Admitted && !failed:
		return waitingForWave(o, current)
	case current == nil || current.RequestID != want.RequestID:
		msg := fmt.Sprintf("pod %s runs revision %s; asked its runtime to drain for revision %s (request %s)", pod.Name, PodRevision(pod), update, want.RequestID)
		if failed {
			_, why := o.podFailure()
			msg = fmt.Sprintf("stale pod %s has failed (%s) and its drain sidecar holds its turns; asked the sidecar to drain for revision %s (request %s)", pod.Name, why, update, want.RequestID)
		}
		if want.Deadline != nil {
			msg += fmt.Sprintf(", deadline %s", want.Deadline.UTC().Format(time.RFC3339))
		}
		a := Action{Kind: RequestDrain, Reason: lullv1.ReasonDrainRequested, Drain: want, Message: msg}
		if want.Deadline != nil {
			a.RequeueAfter = max(want.Deadline.Sub(o.Now), 0) + time.Second/10
		}
		return a
	case drain.Answers(current, s.Status.Runtime, pod.UID):
		return commitDrained(o, fmt.Sprintf("runtime of pod %s reported Drained for request %s; replacing the pod", pod.Name, current.RequestID))
	case current.Deadline != nil && !o.Now.Before(current.Deadline.Time):
		return deadlinePassed(o)
	default:
		// want is current, with a deadline added if the policy now has one.
		a := Action{Kind: Wait, Reason: lullv1.ReasonDraining, Drain: want,
			Message: fmt.Sprintf("waiting for the runtime of pod %s to drain (request %s)", pod.Name, want.RequestID)}
		if want.Deadline != nil {
			a.Message += fmt.Sprintf("; deadline %s", want.Deadline.UTC().Format(time.RFC3339))
			a.RequeueAfter = want.Deadline.Sub(o.Now) + time.Second/10
		}
		return a
	}
}

// deadlinePassed is the step for a drain whose request's deadline has
// passed unanswered: under the Replace strategy or onDrainTimeout Replace,
// commit the pod's replacement (its runtime was told when); otherwise wait,
// saying the drain is overdue.
func deadlinePassed(o Observed) Action {
	s, pod, current := o.Session, o.Pod, o.Session.Status.Drain
	turns := "its runtime's turns"
	if r := s.Status.Runtime; r != nil && r.PodUID == pod.UID {
		turns = fmt.Sprintf("%d active turn(s)", r.ActiveTurns)
	}
	switch {
	case o.Policy.Strategy == lullv1.UpdateStrategyReplace:
		return commitCutShort(o, lullv1.ReplacementReplaced,
			fmt.Sprintf("strategy Replace: replacing stale pod %s without a drain (request %s), with %s", pod.Name, current.RequestID, turns))
	case o.Policy.OnDrainTimeout == lullv1.DrainTimeoutReplace:
		return commitCutShort(o, lullv1.ReplacementDrainDeadlineExceeded,
			fmt.Sprintf("drain request %s passed its deadline %s undrained; replacing pod %s with %s (onDrainTimeout Replace)",
				current.RequestID, current.Deadline.UTC().Format(time.RFC3339), pod.Name, turns))
	default:
		return Action{Kind: Wait, Reason: lullv1.ReasonDrainOverdue, Drain: current,
			Message: fmt.Sprintf("drain request %s passed its deadline %s; still waiting for the runtime of pod %s (%s; onDrainTimeout Wait)",
				current.RequestID, current.Deadline.UTC().Format(time.RFC3339), pod.Name, turns)}
	}
}

// finishCommitted returns the step that finishes a replacement committed for
// the session's pod, if there is one. A commitment never lapses, whatever
// its reason and whatever changed since: the pod's runtime refuses turns
// while status.replacement names its pod, so deleting it is safe, and
// another controller may already have a delete of it in flight (a delete
// held up in the network, an old leader waking up). Were the commitment
// dropped, the runtime would reopen under that delete.
func finishCommitted(o Observed, j lifecycle.Judgement) (Action, bool) {
	s, pod := o.Session, o.Pod
	c := s.Status.Replacement
	if c == nil || pod == nil || c.PodUID != pod.UID || pod.DeletionTimestamp != nil {
		return Action{}, false
	}
	if a, ok := finishCull(o, j); ok {
		return a, true
	}
	if s.Spec.Suspend {
		// Replicas scales the StatefulSet to zero, which removes the pod;
		// deleting it as well could race a recreation.
		return Action{Kind: Wait, Reason: lullv1.ReasonSuspending, Drain: s.Status.Drain, Replacement: c,
			Message: fmt.Sprintf("suspending: scaling pod %s away (%s)", pod.Name, c.Reason)}, true
	}
	if why, disrupted := o.nodeDisrupted(); disrupted {
		return handOff(o, c, why), true
	}
	return Action{Kind: DeletePod, Reason: string(c.Reason), PodUID: pod.UID, Drain: s.Status.Drain, Replacement: c,
		Message: fmt.Sprintf("finishing the committed replacement of pod %s (%s)", pod.Name, c.Reason)}, true
}

// replaceUnserved returns the Commit that replaces a pod whose runtime cannot
// be serving a turn (PodFailure or NeverStarted), if the pod is one. With
// backoff, a replacement waits out the backoff of earlier failed
// replacements first. A failed pod whose drain sidecar holds its turns
// (drainsFirst) is not one: it is drained.
func replaceUnserved(o Observed, backoff bool) (Action, bool) {
	s, pod := o.Session, o.Pod
	reason, why := lullv1.ReplacementPodFailed, ""
	if o.drainsFirst() {
		// Its drain sidecar holds its turns: drained (Decide, decideSuspend).
		return Action{}, false
	} else if failed, w := o.podFailure(); failed {
		why = w
	} else if never, w := NeverStarted(pod, s.Status); never {
		reason, why = lullv1.ReplacementNeverStarted, w
	} else {
		return Action{}, false
	}
	if wait := backoffRemaining(s.Status, o.Now); backoff && wait > 0 {
		return Action{Kind: Wait, Reason: lullv1.ReasonReplacementBackoff, Drain: s.Status.Drain, RequeueAfter: wait,
			// An instant, not a countdown: a message that changed on every
			// reconcile would be a status write on every reconcile.
			Message: fmt.Sprintf("stale pod %s cannot serve (%s); replacing it at %s (backoff after %d failed replacements)", pod.Name, why, o.Now.Add(wait).UTC().Truncate(time.Second).Format(time.RFC3339), s.Status.FailedReplacements)}, true
	}
	return Action{Kind: Commit, Reason: string(reason), PodUID: pod.UID, Drain: s.Status.Drain,
		Replacement: &lullv1.Replacement{PodUID: pod.UID, Reason: reason, CommittedAt: metav1.NewTime(o.Now.Truncate(time.Second))},
		Message:     fmt.Sprintf("stale pod %s cannot serve (%s); replacing it without a drain", pod.Name, why)}, true
}

// commitDrained returns the Commit of a pod whose runtime answered the
// outstanding drain request.
func commitDrained(o Observed, msg string) Action {
	d := o.Session.Status.Drain
	return Action{Kind: Commit, Reason: lullv1.ReasonDrained, PodUID: o.Pod.UID, Drain: d, Message: msg,
		Replacement: &lullv1.Replacement{PodUID: o.Pod.UID, Reason: lullv1.ReplacementDrained, RequestID: d.RequestID, CommittedAt: metav1.NewTime(o.Now.Truncate(time.Second))}}
}

// commitCutShort returns the Commit of a pod replaced without a Drained
// report (reason Forced, Replaced or DrainDeadlineExceeded). It is the same
// compare-and-swap as a drained one: an old leader that decided it and
// paused lands nothing on a Session that has moved on since (the request
// withdrawn, the runtime reopened). The outstanding request is kept, and
// named in the commitment when it is for the pod.
func commitCutShort(o Observed, reason lullv1.ReplacementReason, msg string) Action {
	d, pod := o.Session.Status.Drain, o.Pod
	c := &lullv1.Replacement{PodUID: pod.UID, Reason: reason, CommittedAt: metav1.NewTime(o.Now.Truncate(time.Second))}
	if d != nil && d.PodUID == pod.UID {
		c.RequestID = d.RequestID
	}
	return Action{Kind: Commit, Reason: string(reason), PodUID: pod.UID, Drain: d, Replacement: c, Message: msg}
}

// terminating waits for a pod being deleted, and says it is stuck once it
// has outlived its deletion timestamp by StuckTerminatingAfter. lull never
// force-deletes a pod or strips its finalizers: the message names the pod,
// its node and finalizers and the manual fix.
func terminating(o Observed, prefix string) Action {
	s, pod := o.Session, o.Pod
	a := Action{Kind: Wait, Reason: lullv1.ReasonPodTerminating, Drain: s.Status.Drain, Replacement: s.Status.Replacement,
		Message: fmt.Sprintf("%swaiting for pod %s to terminate", prefix, pod.Name)}
	stuckAt := pod.DeletionTimestamp.Add(StuckTerminatingAfter)
	if o.Now.Before(stuckAt) {
		a.RequeueAfter = stuckAt.Sub(o.Now) + time.Second
		return a
	}
	node := pod.Spec.NodeName
	if node == "" {
		node = "(none)"
	}
	a.Reason = lullv1.ReasonPodStuckTerminating
	// The deadline, not the time since: the message must not change from
	// one reconcile to the next, or every reconcile writes the status (at
	// 2,000 sessions, 3 writes per stuck session).
	a.Message = fmt.Sprintf("%spod %s is still terminating, past its deletion deadline of %s (node %s, finalizers %v); "+
		"lull never force-deletes: if node %s is gone, delete the Node object; if a finalizer's controller is gone, remove that finalizer; "+
		"as a last resort `kubectl delete pod %s --grace-period=0 --force`",
		prefix, pod.Name, pod.DeletionTimestamp.UTC().Format(time.RFC3339), node, pod.Finalizers, node, pod.Name)
	return a
}

// updateRequest returns the Update drain request for a pod and target
// revision: the outstanding one if it already asks exactly that (its
// deadline kept: the runtime has told its user), or a new one with the next
// drain sequence number, so its ID was never used before, and the deadline
// of the policy: now under Replace, now + drainTimeout if set.
func updateRequest(st lullv1.SessionStatus, pod types.UID, revision string, now time.Time, p lullv1.UpdatePolicy) *lullv1.DrainRequest {
	if c := st.Drain; c != nil && c.PodUID == pod && c.Reason == lullv1.DrainReasonUpdate && c.Revision == revision {
		c = c.DeepCopy()
		if c.Deadline == nil && p.Strategy == lullv1.UpdateStrategyReplace {
			// Replace came after the request: it is replaced now.
			d := metav1.NewTime(now.Truncate(time.Second))
			c.Deadline = &d
		} else if c.Deadline == nil && p.DrainTimeout != nil {
			// A deadline came after the request (a break-glass, a
			// drainTimeout set mid-drain): the runtime gets the whole
			// timeout from now to warn its user.
			d := metav1.NewTime(deadlineAfter(now, p.DrainTimeout.Duration))
			c.Deadline = &d
		}
		return c
	}
	r := newRequest(st, pod, lullv1.DrainReasonUpdate, now)
	r.Revision = revision
	switch {
	case p.Strategy == lullv1.UpdateStrategyReplace:
		r.Deadline = r.RequestedAt.DeepCopy()
	case p.DrainTimeout != nil:
		d := metav1.NewTime(deadlineAfter(now, p.DrainTimeout.Duration))
		r.Deadline = &d
	}
	return r
}

// newRequest issues a request with the next drain sequence number. The
// status patch that writes it also writes the sequence number, with a
// resourceVersion precondition, so two writers cannot issue the same one.
func newRequest(st lullv1.SessionStatus, pod types.UID, reason lullv1.DrainReason, now time.Time) *lullv1.DrainRequest {
	seq := st.DrainSequence + 1
	return &lullv1.DrainRequest{
		RequestID:   drain.RequestID(pod, reason, seq),
		PodUID:      pod,
		Reason:      reason,
		Sequence:    seq,
		RequestedAt: metav1.NewTime(now.Truncate(time.Second)),
	}
}

// PodRevision returns the StatefulSet revision a pod was created from: its
// controller-revision-hash label.
func PodRevision(pod *corev1.Pod) string {
	return pod.Labels[appsv1.ControllerRevisionHashLabelKey]
}

func upToDateMessage(pod *corev1.Pod, update string) string {
	return fmt.Sprintf("pod %s runs the update revision %s", pod.Name, update)
}

// deadlineAfter returns the deadline timeout after now, rounded up to the
// second the API stores: the runtime gets at least the whole timeout to
// warn its user.
func deadlineAfter(now time.Time, timeout time.Duration) time.Time {
	d := now.Add(timeout)
	if t := d.Truncate(time.Second); !t.Equal(d) {
		return t.Add(time.Second)
	}
	return d
}
