package rollout

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lifecycle"
)

// NextStatus returns the controller's part of the session status once a has
// been carried out: phase, pod, revisions, conditions, drain request and
// replacement bookkeeping; j is Judge(o), the judgement Decide was given
// (the Active condition and status.lifecycle say it). It starts from the
// observed status, so condition transition times move only when a
// condition's status changes, and it never touches status.runtime, which
// belongs to the runtime.
func NextStatus(o Observed, j lifecycle.Judgement, a Action) lullv1.SessionStatus {
	s := o.Session
	st := *s.Status.DeepCopy()
	st.ObservedGeneration = s.Generation
	st.Drain = a.Drain
	st.Replacement = a.Replacement
	if a.Drain != nil && a.Drain.Sequence > st.DrainSequence {
		st.DrainSequence = a.Drain.Sequence
	}
	st.PodName, st.PodUID, st.CurrentRevision, st.TemplateRevision = "", "", "", ""
	if o.Pod != nil {
		st.PodName, st.PodUID, st.CurrentRevision = o.Pod.Name, o.Pod.UID, PodRevision(o.Pod)
		st.TemplateRevision = o.Pod.Labels[lullv1.LabelTemplateRevision]
	}
	// Recorded for as long as the pod is the session's: a later write to
	// status.runtime cannot erase it (see NeverStarted, PodFailure).
	rec := startRecordOf(o)
	st.StartedPodUID, st.StartedReportTime, st.StartedRunTime = rec.PodUID, rec.ReportTime, rec.RunTime
	st.UpdateRevision = ""
	if o.StatefulSet != nil {
		st.UpdateRevision = o.StatefulSet.Status.UpdateRevision
	}

	if a.Kind == Commit && a.Replacement != nil && a.Replacement.Reason.Failed() {
		// Counted in the commit, before the delete: a write that meets a
		// conflict is retried whole, so the count cannot be lost.
		now := metav1.NewTime(o.Now)
		st.LastFailedReplacementTime = &now
		st.FailedReplacements++
	}
	// A pod on a lost node is not ready, whatever its last status says:
	// nobody updates that status any more.
	loss, lost := o.nodeLost()
	ready := !lost && a.Kind != DeletePod && a.Kind != HandOff && a.Kind != Commit && o.Pod != nil && o.Pod.DeletionTimestamp == nil && podReady(o)
	if ready && a.Reason == lullv1.ReasonUpToDate {
		st.FailedReplacements = 0
	}

	set := func(typ string, status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: typ, Status: status, Reason: reason, Message: msg,
			ObservedGeneration: s.Generation, LastTransitionTime: metav1.NewTime(o.Now),
		})
	}

	switch {
	case lost:
		set(lullv1.ConditionReady, metav1.ConditionFalse, lullv1.ReasonNodeLost, nodeLostMessage(o.Pod, loss))
	case ready:
		set(lullv1.ConditionReady, metav1.ConditionTrue, lullv1.ReasonPodReady, fmt.Sprintf("pod %s is running and ready", o.Pod.Name))
	case s.Spec.Suspend:
		set(lullv1.ConditionReady, metav1.ConditionFalse, lullv1.ReasonSuspended, "session is suspended")
	case len(o.PendingClaims) > 0 && (o.Pod == nil || o.Pod.Status.Phase == corev1.PodPending):
		set(lullv1.ConditionReady, metav1.ConditionFalse, lullv1.ReasonClaimPending, strings.Join(o.PendingClaims, "; "))
	case o.Pod == nil:
		set(lullv1.ConditionReady, metav1.ConditionFalse, lullv1.ReasonPodPending, "session has no pod yet")
	default:
		reason, msg := lullv1.ReasonPodNotReady, fmt.Sprintf("pod %s is %s", o.Pod.Name, o.Pod.Status.Phase)
		if failed, why := o.podFailure(); failed {
			reason, msg = lullv1.ReasonPodFailed, fmt.Sprintf("pod %s has failed: %s", o.Pod.Name, why)
		}
		set(lullv1.ConditionReady, metav1.ConditionFalse, reason, msg)
	}
	if !ready && o.Pod != nil && s.Status.PodUID != o.Pod.UID {
		// A new pod (a replacement, a resumed session) is not Ready yet:
		// the time it has to become Ready (the brake's progress deadline)
		// starts now, not when the session last stopped being Ready,
		// which for a resumed session was its suspension.
		meta.FindStatusCondition(st.Conditions, lullv1.ConditionReady).LastTransitionTime = metav1.NewTime(o.Now)
	}
	if !ready && o.Pod == nil && !s.Spec.Suspend && (s.Status.PodUID != "" || hasConditionReason(s, lullv1.ConditionReady, lullv1.ReasonSuspended)) {
		// The session has just lost its pod (its node went, someone
		// deleted it, a replacement) or its suspension has just ended:
		// the time it has to get a pod and become Ready starts now, not
		// when it last stopped being Ready, which may be long before (a
		// pod stuck on a lost node, the suspension itself).
		meta.FindStatusCondition(st.Conditions, lullv1.ConditionReady).LastTransitionTime = metav1.NewTime(o.Now)
	}

	switch {
	case s.Spec.Suspend:
		reason := lullv1.ReasonSuspended
		if o.Pod != nil {
			reason = lullv1.ReasonSuspending
		}
		msg := a.Message
		if a.Drain != nil && o.Pod != nil && Replicas(o) == 1 && (a.Reason == lullv1.ReasonDrainRequested || a.Reason == lullv1.ReasonSuspending) {
			// One condition for the whole drain, as for an update: the
			// request and the wait for its answer cost one status write.
			msg = fmt.Sprintf("suspending: waiting for the runtime of pod %s to drain (request %s)", o.Pod.Name, a.Drain.RequestID)
		}
		set(lullv1.ConditionUpToDate, metav1.ConditionUnknown, reason, msg)
	default:
		setUpToDate(o, a, set)
	}

	if st.Drain != nil {
		msg := fmt.Sprintf("drain request %s for pod %s", st.Drain.RequestID, st.Drain.PodUID)
		switch {
		case st.Drain.Node != "" && a.Reason == lullv1.ReasonNodeDrain && a.Message != "":
			// Which node, why, the deadline, and whether the node's drain
			// waits on the session: the step's own words.
			msg = a.Message
		case st.Drain.Node != "":
			msg += fmt.Sprintf(", whose node %s is being drained", st.Drain.Node)
		}
		set(lullv1.ConditionDraining, metav1.ConditionTrue, string(st.Drain.Reason), msg)
	} else {
		set(lullv1.ConditionDraining, metav1.ConditionFalse, lullv1.ReasonNoDrainRequest, "no drain request is outstanding")
	}

	if lost && st.Drain != nil {
		noteNodeLost(&st.Conditions, o.Pod, loss)
	}

	setBudgetsOverlap(o, &st.Conditions)
	setPinnedToNode(o, &st.Conditions)

	st.Lifecycle = j.Status
	switch r := s.Status.Runtime; j.State {
	case lifecycle.NotReporting:
		found := "none"
		if r != nil {
			found = fmt.Sprintf("one of pod %s", r.PodUID)
		}
		set(lullv1.ConditionActive, metav1.ConditionUnknown, lullv1.ReasonRuntimeNotReporting,
			fmt.Sprintf("pod %s has been ready since %s and its runtime has written no report of its own (status.runtime holds %s); "+
				"the session is not culled while it does not report: check the runtime's logs and its RoleBinding lull-runtime-%s",
				o.Pod.Name, j.ReportDue.Add(-lifecycle.FirstReportGrace).UTC().Format(time.RFC3339), found, s.Name))
	case lifecycle.Active:
		set(lullv1.ConditionActive, metav1.ConditionTrue, lullv1.ReasonTurnsInFlight, fmt.Sprintf("%d turns in flight", r.ActiveTurns))
	case lifecycle.Idle:
		set(lullv1.ConditionActive, metav1.ConditionFalse, lullv1.ReasonIdle, "no turn in flight")
	case lifecycle.Unjudged:
		set(lullv1.ConditionActive, metav1.ConditionFalse, lullv1.ReasonIdle, "no turn in flight; the runtime declares no report refresh bound, so it is never culled for idleness")
	default:
		set(lullv1.ConditionActive, metav1.ConditionUnknown, lullv1.ReasonNoReport, "the runtime of the current pod has not reported")
	}

	st.Phase = phase(o, a, st)
	return st
}

// noteNodeLost adds to the Draining condition, and to the UpToDate
// condition of a drain-driven wait, that the runtime of the pod cannot
// answer because its node is lost: a drain outstanding on such a pod must
// not wait in silence. The note is the same from one reconcile to the next
// (it names the node's transition time, not the time now), so it costs no
// status write of its own.
func noteNodeLost(conditions *[]metav1.Condition, pod *corev1.Pod, l NodeLoss) {
	note := nodeLostDrainNote(pod, l)
	for _, typ := range []string{lullv1.ConditionDraining, lullv1.ConditionUpToDate} {
		c := meta.FindStatusCondition(*conditions, typ)
		if c == nil || c.Status == metav1.ConditionTrue && typ == lullv1.ConditionUpToDate || strings.Contains(c.Message, note) {
			continue
		}
		c.Message += note
	}
}

// setUpToDate sets the UpToDate condition of a session that is not
// suspended.
func setUpToDate(o Observed, a Action, set func(typ string, status metav1.ConditionStatus, reason, msg string)) {
	switch a.Reason {
	case lullv1.ReasonIdleCull, lullv1.ReasonIdleCullWithdrawn, lullv1.ReasonLifetime, lullv1.ReasonNodeDrain:
		// A lifecycle step, or a node drain, says nothing of the revision:
		// the Draining and Active conditions and status.lifecycle tell it.
		update := ""
		if o.StatefulSet != nil {
			update = o.StatefulSet.Status.UpdateRevision
		}
		switch {
		case o.Pod == nil || update == "":
			set(lullv1.ConditionUpToDate, metav1.ConditionUnknown, a.Reason, a.Message)
		case PodRevision(o.Pod) == update:
			set(lullv1.ConditionUpToDate, metav1.ConditionTrue, lullv1.ReasonUpToDate, upToDateMessage(o.Pod, update))
		case o.Policy.Strategy == lullv1.UpdateStrategyPassive:
			set(lullv1.ConditionUpToDate, metav1.ConditionFalse, lullv1.ReasonUpdatePending,
				fmt.Sprintf("pod %s runs revision %s; the update to revision %s waits until the pod is replaced (strategy Passive)", o.Pod.Name, PodRevision(o.Pod), update))
		default:
			set(lullv1.ConditionUpToDate, metav1.ConditionFalse, a.Reason, a.Message)
		}
	case lullv1.ReasonUpToDate:
		set(lullv1.ConditionUpToDate, metav1.ConditionTrue, a.Reason, a.Message)
	case lullv1.ReasonDrainRequested, lullv1.ReasonDraining:
		// One condition for the whole drain: the request and the wait for
		// its answer read the same, so the wait costs no status write.
		msg := fmt.Sprintf("pod %s runs revision %s; waiting for its runtime to drain for revision %s (request %s)",
			o.Pod.Name, PodRevision(o.Pod), a.Drain.Revision, a.Drain.RequestID)
		if d := a.Drain.Deadline; d != nil {
			msg += fmt.Sprintf("; deadline %s", d.UTC().Format(time.RFC3339))
		}
		set(lullv1.ConditionUpToDate, metav1.ConditionFalse, lullv1.ReasonDraining, msg)
	case lullv1.ReasonRevisionUnknown, lullv1.ReasonStatefulSetPending, lullv1.ReasonPodPending, lullv1.ReasonPodTerminating, lullv1.ReasonSuspended:
		set(lullv1.ConditionUpToDate, metav1.ConditionUnknown, a.Reason, a.Message)
	default:
		set(lullv1.ConditionUpToDate, metav1.ConditionFalse, a.Reason, a.Message)
	}
}

func phase(o Observed, a Action, st lullv1.SessionStatus) lullv1.SessionPhase {
	switch {
	case o.Session.Spec.Suspend && (o.Pod == nil || o.Pod.DeletionTimestamp != nil || Replicas(o) == 0):
		return lullv1.SessionSuspended
	case a.Kind == DeletePod || a.Kind == HandOff || a.Kind == Commit || o.Pod == nil || o.Pod.DeletionTimestamp != nil:
		return lullv1.SessionPending
	case st.Drain != nil:
		return lullv1.SessionDraining
	}
	if failed, _ := o.podFailure(); failed {
		return lullv1.SessionFailed
	}
	if o.Pod.Status.Phase == corev1.PodRunning {
		return lullv1.SessionRunning
	}
	return lullv1.SessionPending
}

// podReady reports whether o's pod is running, ready, and not failed.
func podReady(o Observed) bool {
	pod := o.Pod
	if failed, _ := o.podFailure(); failed || pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podFailure is PodFailure of o's pod, judged with the session's report.
func (o Observed) podFailure() (bool, string) {
	return PodFailure(o.Pod, o.Session.Status, o.ReportWrittenAt)
}

// Passing reports whether the session is passing through a state that
// normally lasts well under a second: the StatefulSet controller has not yet
// published the new revision, the old pod is terminating, the new pod is
// not yet created or not yet running, or its runtime has not yet reported.
// The reconciler writes such a state only if it lasts (see
// session.SettleDelay), which keeps a drained replacement to three status
// writes: the drain request, the commitment, and the session running its
// new pod (four when its start must be recorded at once: RecordStart).
func Passing(o Observed, a Action) bool {
	switch a.Reason {
	case lullv1.ReasonRevisionUnknown, lullv1.ReasonPodTerminating, lullv1.ReasonPodPending, lullv1.ReasonStatefulSetPending:
		return true
	case lullv1.ReasonWaitingForWave:
		// The template controller admits a stale session by its revision,
		// most often at once; only a session still waiting after the
		// settle delay says so (one status write fewer per session).
		return true
	case lullv1.ReasonSuspending:
		return Replicas(o) == 0 // drained; the StatefulSet controller is removing the pod
	case lullv1.ReasonUpToDate:
		if failed, _ := o.podFailure(); failed {
			// A failing pod is no passing state: it shows at once.
			return false
		}
		if !podReady(o) {
			return true
		}
		r := o.Session.Status.Runtime
		return r == nil || r.PodUID != o.Pod.UID
	}
	return false
}

// Current reports whether s counts as current for its template, whose
// current revision is revision (render.TemplateRevision): its pod runs that
// template revision (status.templateRevision) and its UpToDate condition is
// True. The template's status.current and lull_template_sessions_current
// count by it.
func Current(s *lullv1.Session, revision string) bool {
	return meta.IsStatusConditionTrue(s.Status.Conditions, lullv1.ConditionUpToDate) && s.Status.TemplateRevision == revision
}

// setBudgetsOverlap sets the BudgetsOverlap condition while other budgets
// than lull's select the session's pod (o.OverlappingBudgets), and removes
// it once none does: absent, it costs the sessions without one nothing.
func setBudgetsOverlap(o Observed, conditions *[]metav1.Condition) {
	if len(o.OverlappingBudgets) == 0 || o.Pod == nil {
		meta.RemoveStatusCondition(conditions, lullv1.ConditionBudgetsOverlap)
		return
	}
	meta.SetStatusCondition(conditions, metav1.Condition{Type: lullv1.ConditionBudgetsOverlap, Status: metav1.ConditionTrue,
		Reason: lullv1.ReasonOverlappingBudgets, ObservedGeneration: o.Session.Generation, LastTransitionTime: metav1.NewTime(o.Now),
		Message: fmt.Sprintf("PodDisruptionBudget %s (lull's) and %s all select pod %s: the Eviction API refuses to evict a pod covered by more than one budget, "+
			"so every eviction of it fails (kubectl drain stops on it, node upgrades wait and then force it); remove the session's pods from %s's selector, "+
			"or set the template's nodeDrainPolicy.strategy to Ignore to leave evictions to your budget",
			o.Session.Name, strings.Join(o.OverlappingBudgets, ", "), o.Pod.Name, strings.Join(o.OverlappingBudgets, ", "))})
}

// setPinnedToNode sets the PinnedToNode condition while the session's pod
// is on a disrupted node that one of its claims holds it on (o.Pinned),
// and removes it otherwise: absent, it costs the other sessions nothing.
func setPinnedToNode(o Observed, conditions *[]metav1.Condition) {
	if _, disrupted := o.nodeDisrupted(); !disrupted || o.Pinned == nil {
		meta.RemoveStatusCondition(conditions, lullv1.ConditionPinnedToNode)
		return
	}
	meta.SetStatusCondition(conditions, metav1.Condition{Type: lullv1.ConditionPinnedToNode, Status: metav1.ConditionTrue,
		Reason: lullv1.ReasonVolumeNodeAffinity, ObservedGeneration: o.Session.Generation, LastTransitionTime: metav1.NewTime(o.Now),
		Message: o.Pinned.String()})
}
