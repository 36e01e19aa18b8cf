package rollout

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
	"lull.dev/lull/internal/lifecycle"
)

// Judge returns the lifecycle judgement of the observed session (see
// package lifecycle). The session's user has woken it when
// lull.dev/keep-alive names its outstanding, uncommitted Idle request.
func Judge(o Observed) lifecycle.Judgement {
	s := o.Session
	d, c := s.Status.Drain, s.Status.Replacement
	woken := d != nil && d.Reason == lullv1.DrainReasonIdle && s.Annotations[lullv1.AnnotationKeepAlive] == d.RequestID &&
		(c == nil || c.RequestID != d.RequestID)
	return lifecycle.Judge(lifecycle.Observed{Now: o.Now, Policy: o.Lifecycle, Session: s, Pod: o.Pod,
		ReportWrittenAt: o.ReportWrittenAt, Woken: woken})
}

// decideLifecycle returns the step of a running session's lifecycle, if it
// has one: an idle cull (a drain with reason Idle, withdrawn again if the
// session wakes before its replacement is committed) or a lifetime restart
// (a drain with reason Lifetime, under a place in the wave). A drain
// request of another reason for the pod goes first; a stale pod is
// restarted for its lifetime only under Passive (other strategies replace
// it anyway).
func decideLifecycle(o Observed, j lifecycle.Judgement, stale bool) (Action, bool) {
	s, pod, cur := o.Session, o.Pod, o.Session.Status.Drain
	if cur != nil && cur.PodUID == pod.UID {
		switch {
		case cur.Reason == lullv1.DrainReasonIdle && stale && updateTakesOver(o) && !committedFor(s, cur):
			// The update of a stale pod has a deadline (Replace, onDrainTimeout
			// Replace, a break-glass): it takes over from an idle drain,
			// which has none and must not hold a security fix off.
			if o.Admitted {
				return Action{}, false
			}
			// Until it has its place, the idle drain goes on, and the
			// session says it waits for the wave: the template admits
			// sessions that say so (PlanWave), and one whose idle drain is
			// outstanding is not otherwise seen as waiting.
			a := idleDrain(o, j)
			if a.Kind == Wait && a.Reason == lullv1.ReasonIdleCull {
				a.Reason = lullv1.ReasonWaitingForWave
				a.Message += "; the update, which has a deadline, takes over once the session has a place in the rollout wave"
			}
			return a, true
		case cur.Reason == lullv1.DrainReasonIdle:
			return idleDrain(o, j), true
		case cur.Reason == lullv1.DrainReasonLifetime && j.LifetimeDue:
			if drain.Answers(cur, s.Status.Runtime, pod.UID) {
				return commitDrained(o, fmt.Sprintf("runtime of pod %s reported Drained for lifetime drain %s; replacing the pod", pod.Name, cur.RequestID)), true
			}
			if cur.Deadline != nil && !o.Now.Before(cur.Deadline.Time) {
				return lifetimeDeadlinePassed(o), true
			}
			if stale && o.Policy.Strategy != lullv1.UpdateStrategyPassive {
				// The pod went stale during its lifetime drain: the update
				// moves it now, under the update policy (its deadline, a
				// break-glass), keeping the place in the wave. A lifetime
				// drain has no deadline and must not hold the update off.
				return Action{}, false
			}
			if cur.Deadline == nil && o.Policy.DrainTimeout != nil {
				// A drainTimeout set while the drain is outstanding bounds
				// it too, the whole timeout from now, on the same request
				// ID (as an update's): the runtime is told when.
				cur = cur.DeepCopy()
				d := metav1.NewTime(deadlineAfter(o.Now, o.Policy.DrainTimeout.Duration))
				cur.Deadline = &d
			}
			a := Action{Kind: Wait, Reason: lullv1.ReasonLifetime, Drain: cur,
				Message: fmt.Sprintf("pod %s reached its maximum lifetime at %s; waiting for its runtime to drain (request %s)", pod.Name, j.Status.LifetimeDeadline.UTC().Format(time.RFC3339), cur.RequestID)}
			if cur.Deadline != nil {
				a.Message += fmt.Sprintf("; deadline %s", cur.Deadline.UTC().Format(time.RFC3339))
				a.RequeueAfter = cur.Deadline.Sub(o.Now) + time.Second/10
			}
			return a, true
		case cur.Reason != lullv1.DrainReasonLifetime:
			return Action{}, false
		}
		// A lifetime drain whose lifetime is no longer due (maxLifetime
		// raised or removed) is withdrawn by the caller's step.
	}
	switch {
	case j.CullDue && stale && o.Admitted && updateTakesOver(o):
		// The update, with its deadline, goes first (see above).
		return Action{}, false
	case j.CullDue:
		r := newRequest(s.Status, pod.UID, lullv1.DrainReasonIdle, o.Now)
		return Action{Kind: RequestDrain, Reason: lullv1.ReasonIdleCull, Drain: r,
			Message: fmt.Sprintf("session idle since %s; asked the runtime of pod %s to drain before the session is %s (request %s)",
				j.Status.IdleSince.UTC().Format(time.RFC3339), pod.Name, culled(j.Status.CullAction), r.RequestID)}, true
	case j.LifetimeDue && (!stale || o.Policy.Strategy == lullv1.UpdateStrategyPassive):
		deadline := j.Status.LifetimeDeadline.UTC().Format(time.RFC3339)
		if !canAnswer(j.State) {
			// A pod whose runtime has no report of its own could not
			// answer the drain: it would hold a place in the wave and
			// starve every other lifetime restart. It waits until its
			// runtime reports. A drain once started is not withdrawn when
			// the runtime goes silent (its report is not rewritten unless
			// it changes, so silence says nothing): the template's
			// drainTimeout and onDrainTimeout bound it.
			return Action{Kind: Wait, Reason: lullv1.ReasonLifetime,
				Message: fmt.Sprintf("pod %s reached its maximum lifetime at %s; waiting for its runtime to report before draining it", pod.Name, deadline)}, true
		}
		if !o.Admitted {
			return Action{Kind: Wait, Reason: lullv1.ReasonLifetime,
				Message: fmt.Sprintf("pod %s reached its maximum lifetime at %s; waiting for a place in the wave", pod.Name, deadline)}, true
		}
		r := newRequest(s.Status, pod.UID, lullv1.DrainReasonLifetime, o.Now)
		a := Action{Kind: RequestDrain, Reason: lullv1.ReasonLifetime, Drain: r,
			Message: fmt.Sprintf("pod %s reached its maximum lifetime at %s; asked its runtime to drain before it is replaced (request %s)", pod.Name, deadline, r.RequestID)}
		if t := o.Policy.DrainTimeout; t != nil {
			// The template's drainTimeout bounds a lifetime drain as it
			// does an update's: a runtime holding a turn forever must not
			// keep its place in the wave forever.
			d := metav1.NewTime(deadlineAfter(o.Now, t.Duration))
			r.Deadline = &d
			a.RequeueAfter = t.Duration + time.Second/10
		}
		return a, true
	}
	return Action{}, false
}

// updateTakesOver reports whether the update of a stale pod goes before
// its idle cull: it has a deadline (Replace, onDrainTimeout Replace, a
// break-glass), which an idle drain has not, and it can be made. While the
// catalog refuses the StatefulSet's image the update is withheld (rule 9,
// withholdOnRefusedImage), and were it to take over, neither would go on:
// the cull, which starts no pod, goes on instead.
func updateTakesOver(o Observed) bool {
	return updateHasDeadline(o.Policy) && o.ImageRefused == ""
}

// idleDrain is the step of a session with an Idle drain request for its
// pod that is not committed: commit once the runtime answers Drained while
// the session is still due for its cull; withdraw the request as soon as it
// is not (a turn began, the runtime reported activity, its report was
// lost, its user resumed it, the policy changed).
func idleDrain(o Observed, j lifecycle.Judgement) Action {
	s, pod, cur := o.Session, o.Pod, o.Session.Status.Drain
	if !j.CullDue {
		return Action{Kind: Wait, Reason: lullv1.ReasonIdleCullWithdrawn,
			Message: fmt.Sprintf("withdrew idle drain %s of pod %s: %s; the session keeps running", cur.RequestID, pod.Name, woke(o, j))}
	}
	if drain.Answers(cur, s.Status.Runtime, pod.UID) {
		return commitDrained(o, fmt.Sprintf("runtime of pod %s reported Drained for idle drain %s; the session is %s", pod.Name, cur.RequestID, culled(j.Status.CullAction)))
	}
	return Action{Kind: Wait, Reason: lullv1.ReasonIdleCull, Drain: cur,
		Message: fmt.Sprintf("session idle since %s; waiting for the runtime of pod %s to drain before it is %s (request %s)",
			j.Status.IdleSince.UTC().Format(time.RFC3339), pod.Name, culled(j.Status.CullAction), cur.RequestID)}
}

// finishCull returns the step that completes an idle cull whose drain is
// committed: suspend or delete the session. If the session is no longer due
// for its cull (activity reached the API server after the commitment), its
// committed pod is replaced and the session keeps running.
func finishCull(o Observed, j lifecycle.Judgement) (Action, bool) {
	s, c, d := o.Session, o.Session.Status.Replacement, o.Session.Status.Drain
	if c.Reason != lullv1.ReplacementDrained || d == nil || d.Reason != lullv1.DrainReasonIdle || d.RequestID != c.RequestID {
		return Action{}, false
	}
	if s.Annotations[lullv1.AnnotationIdleSuspended] == d.RequestID {
		// This cull suspended the session already, and it was resumed
		// before its pod was scaled away: the pod is replaced instead.
		return Action{}, false
	}
	if s.Spec.Suspend {
		// Someone else suspended the session while its idle cull was
		// committed: the suspension scales the pod away. The request is
		// named in lull.dev/idle-suspended all the same (SuspendSession
		// with spec.suspend already true), so that a resume before the
		// pod is gone is not undone by suspending again for this cull.
		return Action{Kind: SuspendSession, Reason: lullv1.ReasonSuspending, Drain: d, Replacement: c,
			Message: fmt.Sprintf("session suspended while its idle cull (request %s) was committed; recording the cull as done", d.RequestID)}, true
	}
	if !j.CullDue {
		return Action{}, false
	}
	since := j.Status.IdleSince.UTC().Format(time.RFC3339)
	switch j.Status.CullAction {
	case lullv1.IdleSuspend:
		return Action{Kind: SuspendSession, Reason: lullv1.ReasonIdleCull, Drain: d, Replacement: c,
			Message: fmt.Sprintf("idle since %s: runtime of pod %s drained (request %s); suspending the session, its workspace kept", since, o.Pod.Name, d.RequestID)}, true
	case lullv1.IdleDelete:
		return Action{Kind: DeleteSession, Reason: lullv1.ReasonIdleCull, Drain: d, Replacement: c,
			Message: fmt.Sprintf("idle since %s: runtime of pod %s drained (request %s); deleting the session", since, o.Pod.Name, d.RequestID)}, true
	}
	return Action{}, false
}

func culled(a lullv1.IdleAction) string {
	if a == lullv1.IdleDelete {
		return "deleted"
	}
	return "suspended"
}

// woke says why a session is no longer due for its idle cull.
func woke(o Observed, j lifecycle.Judgement) string {
	r := o.Session.Status.Runtime
	switch {
	case o.Session.Annotations[lullv1.AnnotationKeepAlive] == o.Session.Status.Drain.RequestID:
		return "its user resumed it (" + lullv1.AnnotationKeepAlive + ")"
	case j.State == lifecycle.Active:
		return fmt.Sprintf("%d turn(s) active", r.ActiveTurns)
	case j.State == lifecycle.NotReporting || j.State == lifecycle.NoReport:
		return "its runtime has no report of its own, so it cannot be judged idle"
	case j.State == lifecycle.Unjudged:
		return "its runtime declares no report refresh bound, so it cannot be judged idle"
	case j.Status == nil || j.Status.CullAt == nil:
		return "the idle policy no longer culls it"
	}
	return fmt.Sprintf("activity at %s; the session is idle again since then", j.Status.IdleSince.UTC().Format(time.RFC3339))
}

// canAnswer reports whether a runtime in lifecycle state st can answer a
// drain request: the current pod's runtime has a report of its own.
func canAnswer(st lifecycle.State) bool {
	return st == lifecycle.Active || st == lifecycle.Idle || st == lifecycle.Unjudged
}

// updateHasDeadline reports whether the update policy moves a stale pod by
// a deadline: the Replace strategy, or a drainTimeout with onDrainTimeout
// Replace (a break-glass is one).
//
// Under Passive it never does: the update moves no running stale pod, and
// drainTimeout and onDrainTimeout bound lifetime drains only.
func updateHasDeadline(p lullv1.UpdatePolicy) bool {
	if p.Strategy == lullv1.UpdateStrategyPassive {
		return false
	}
	return p.Strategy == lullv1.UpdateStrategyReplace || (p.DrainTimeout != nil && p.OnDrainTimeout == lullv1.DrainTimeoutReplace)
}

// committedFor reports whether the session's replacement is committed for
// request d.
func committedFor(s *lullv1.Session, d *lullv1.DrainRequest) bool {
	c := s.Status.Replacement
	return c != nil && c.RequestID == d.RequestID
}

// lifetimeDeadlinePassed is the step for a lifetime drain whose deadline
// (the template's drainTimeout) has passed unanswered: onDrainTimeout
// Replace commits the pod's replacement, Wait keeps waiting, saying so.
func lifetimeDeadlinePassed(o Observed) Action {
	pod, cur := o.Pod, o.Session.Status.Drain
	turns := "its runtime's turns"
	if r := o.Session.Status.Runtime; r != nil && r.PodUID == pod.UID {
		turns = fmt.Sprintf("%d active turn(s)", r.ActiveTurns)
	}
	if o.Policy.OnDrainTimeout == lullv1.DrainTimeoutReplace {
		return commitCutShort(o, lullv1.ReplacementDrainDeadlineExceeded,
			fmt.Sprintf("lifetime drain %s passed its deadline %s undrained; replacing pod %s with %s (onDrainTimeout Replace)",
				cur.RequestID, cur.Deadline.UTC().Format(time.RFC3339), pod.Name, turns))
	}
	return Action{Kind: Wait, Reason: lullv1.ReasonLifetime, Drain: cur,
		Message: fmt.Sprintf("lifetime drain %s passed its deadline %s; still waiting for the runtime of pod %s (%s; onDrainTimeout Wait)",
			cur.RequestID, cur.Deadline.UTC().Format(time.RFC3339), pod.Name, turns)}
}
