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

// notTheRevisions are the UpToDate reasons of a session held back by a
// cause no revision of its template made, which the brake does not count:
// moving no more sessions would not remove it, and the session's condition
// already names it, so a pause would only outlast it.
var notTheRevisions = map[string]bool{
	// It waits for the template's files ConfigMap and has not moved: no
	// pod was taken away, and the template's FilesReady condition names
	// the cause.
	lullv1.ReasonFilesNotReady: true,
	// An unscoped ResourceQuota of the namespace refuses its pod, or an
	// object lull makes for it: the namespace's capacity, which any
	// revision meets alike. A scoped quota's refusal of a pod is
	// PodCreateRefused (PodCreateRefusal): the revision puts its pod in
	// the scope.
	lullv1.ReasonPodQuotaExceeded: true,
	lullv1.ReasonQuotaExceeded:    true,
	// An admission webhook the API server could not call: its outage,
	// which any revision's pod meets alike.
	lullv1.ReasonAdmissionUnavailable: true,
	// Its pod is being deleted: evicted from a lost node (the taint
	// manager deletes a pod of an unreachable node after its toleration,
	// 5 minutes by default, and the pod stays terminating until the node
	// is removed), or deleted by someone, or held by a foreign finalizer.
	// The pod that replaces it is judged on its own.
	lullv1.ReasonPodTerminating:      true,
	lullv1.ReasonPodStuckTerminating: true,
	// Held back before anything is rendered: by a missing template (a
	// GitOps replace, a chart reinstall), by the objects a Session of its
	// name left (a pod stuck on a lost node), or by a name another owner
	// holds. No pod of any revision was made for it.
	lullv1.ReasonTemplateNotFound:       true,
	lullv1.ReasonPredecessorTerminating: true,
	lullv1.ReasonNameConflict:           true,
	// Suspended, or resumed a moment ago and its status not yet written
	// again (the template's watch sees the resume first): it has no pod
	// because no one wanted one.
	lullv1.ReasonSuspended:  true,
	lullv1.ReasonSuspending: true,
}

// DecideBrake judges a template's rollout: paused by hand
// (spec.updatePolicy.paused), or by the brake once failureThreshold
// sessions run the update revision rev and fail on it: their Ready
// condition says PodFailed (the runtime container cannot start), or has
// not been True for progressDeadlineSeconds; a session left with no pod
// for that long counts as failing too, unless its UpToDate reason names a
// cause no revision made (notTheRevisions: a wait for the template's
// files, a quota, a pod terminating, a missing template, a predecessor's
// objects, a name conflict, a suspension). Once the brake stops a
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
		if c := meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionUpToDate); c != nil && notTheRevisions[c.Reason] {
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
