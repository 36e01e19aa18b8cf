package rollout

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// DefaultProgressDeadline is progressDeadlineSeconds when unset, as a
// Deployment's.
const DefaultProgressDeadline = 600 * time.Second

// Brake is the state of a template's rollout brake.
type Brake struct {
	// Paused: no new session is admitted to the wave.
	Paused bool
	// Reason and Message of the RolloutPaused condition.
	Reason, Message string
	// Failing are the sessions failing on the update revision, sorted.
	Failing []string
	// PausedRevision is the revision the brake stopped (status
	// pausedRevision), or "".
	PausedRevision string
	// RequeueAfter is when a not-yet-failing session would cross the
	// progress deadline; zero if none.
	RequeueAfter time.Duration
}

// DecideBrake judges a template's rollout: paused by hand
// (spec.updatePolicy.paused), or by the brake once failureThreshold
// sessions run the update revision rev and fail on it: their Ready
// condition says PodFailed (the runtime container cannot start), or has
// not been True for progressDeadlineSeconds; a session left with no pod
// for that long counts as failing too, unless it waits for the template's
// files ConfigMap (lullv1.ReasonFilesNotReady) or a ResourceQuota refuses
// its pod (lullv1.ReasonPodQuotaExceeded), or it is held back by its
// predecessor's objects (lullv1.ReasonPredecessorTerminating) or a name
// another owner holds (lullv1.ReasonNameConflict): none is the revision's. A
// session whose pod is terminating (lullv1.ReasonPodTerminating,
// lullv1.ReasonPodStuckTerminating: its node lost, a foreign finalizer, a
// delete by someone else) is not counted either. Once the brake stops a
// revision it stays stopped until the revision changes or the template's
// lull.dev/resume-rollout annotation names it. Sessions already moving
// finish; the others keep their revision.
func DecideBrake(t *lullv1.SessionTemplate, rev string, sessions []lullv1.Session, now time.Time) Brake {
	p := t.Spec.UpdatePolicy
	deadline := DefaultProgressDeadline
	if p.ProgressDeadlineSeconds != nil {
		deadline = time.Duration(*p.ProgressDeadlineSeconds) * time.Second
	}
	var b Brake
	running := 0
	for i := range sessions {
		s := &sessions[i]
		if s.Spec.Suspend || s.DeletionTimestamp != nil {
			continue
		}
		running++
		// A session with no pod at all counts too: a revision whose pods
		// the API server refuses (a PodSecurity level, a quota, a webhook)
		// leaves each session it reaches without one, and moving more
		// sessions would only take more pods away.
		noPod := s.Status.PodUID == "" && s.Status.TemplateRevision == ""
		if s.Status.TemplateRevision != rev && !noPod {
			continue
		}
		if hasConditionReason(s, lullv1.ConditionUpToDate, lullv1.ReasonFilesNotReady) {
			// It waits for the template's files ConfigMap and has not
			// moved: no pod was taken away, and the template's FilesReady
			// condition already names the cause. Pausing would outlast it.
			continue
		}
		if hasConditionReason(s, lullv1.ConditionUpToDate, lullv1.ReasonPodQuotaExceeded) {
			// A ResourceQuota of the namespace refuses its pod: the
			// namespace's capacity, which any revision meets alike, and
			// the session's condition names the quota. Pausing the
			// revision would outlast the quota being raised.
			continue
		}
		if hasConditionReason(s, lullv1.ConditionUpToDate, lullv1.ReasonPredecessorTerminating) ||
			hasConditionReason(s, lullv1.ConditionUpToDate, lullv1.ReasonNameConflict) {
			// It is held back before anything is rendered: by the objects
			// a Session of its name left (a pod stuck on a lost node, say)
			// or by a name another owner holds. No pod of any revision was
			// made for it, and its condition names the cause.
			continue
		}
		if hasConditionReason(s, lullv1.ConditionUpToDate, lullv1.ReasonPodTerminating) ||
			hasConditionReason(s, lullv1.ConditionUpToDate, lullv1.ReasonPodStuckTerminating) {
			// Its pod is being deleted: evicted from a lost node (the
			// taint manager deletes a pod of an unreachable node after its
			// toleration, 5 minutes by default, and the pod stays
			// terminating until the node is removed), or deleted by
			// someone, or held by a foreign finalizer. None of it is the
			// revision's: the pod that replaces it is judged on its own.
			continue
		}
		c := meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionReady)
		if c == nil || c.Status == metav1.ConditionTrue {
			continue
		}
		if since := now.Sub(c.LastTransitionTime.Time); c.Reason == lullv1.ReasonPodFailed || since >= deadline {
			b.Failing = append(b.Failing, s.Name)
		} else {
			b.RequeueAfter = Soonest(b.RequeueAfter, deadline-since)
		}
	}
	sort.Strings(b.Failing)
	threshold := intstr.FromInt32(1)
	if p.FailureThreshold != nil {
		threshold = *p.FailureThreshold
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&threshold, running, true)
	if err != nil || n < 1 {
		n = 1
	}
	resumed := t.Annotations[lullv1.AnnotationResumeRollout] == rev
	switch {
	case p.Paused:
		b.Paused, b.Reason, b.Message = true, lullv1.ReasonPaused, "spec.updatePolicy.paused is true: no session starts moving; those moving finish"
	case !resumed && (t.Status.PausedRevision == rev || len(b.Failing) >= n):
		b.Paused, b.Reason, b.PausedRevision = true, lullv1.ReasonFailureThreshold, rev
		b.Message = fmt.Sprintf("%d session(s) failed on revision %s (failureThreshold %d): %s; sessions not yet moved keep their revision. "+
			"Fix the template (a new revision continues) or `lull rollout resume %s`", len(b.Failing), rev, n, names(b.Failing, 5), t.Name)
	default:
		b.Reason, b.Message = lullv1.ReasonProgressing, "sessions move as the update policy allows"
	}
	return b
}

// names lists at most shown names, and how many more.
func names(all []string, shown int) string {
	if len(all) == 0 {
		return "none now"
	}
	if len(all) <= shown {
		return strings.Join(all, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(all[:shown], ", "), len(all)-shown)
}

// EffectivePolicy is the update policy sessions of t follow now: the
// template's, or, while spec.breakGlass names the template's revision rev,
// Drain with the break-glass grace as a deadline and Replace after it,
// whatever the strategy. The wave, a pause and the brake still apply: a
// broken security fix stops like any other revision.
func EffectivePolicy(t *lullv1.SessionTemplate, rev string) lullv1.UpdatePolicy {
	p := t.Spec.UpdatePolicy
	if bg := t.Spec.BreakGlass; bg != nil && bg.Revision == rev {
		p.Strategy = lullv1.UpdateStrategyDrain
		p.DrainTimeout = &metav1.Duration{Duration: max(bg.Grace.Duration, time.Second)}
		p.OnDrainTimeout = lullv1.DrainTimeoutReplace
	}
	return p
}
