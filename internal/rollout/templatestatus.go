package rollout

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/render"
)

// NextTemplateStatus is the template's status from its sessions as seen at
// now: the counts (Summarize), the brake (DecideBrake), the next wave (at
// most maxUnavailable of the effective policy, none while paused or while
// t's ImageAllowed condition is False), the expected completion from mean,
// the mean move time, when measured says one was measured, and the
// conditions. It returns when to look again (0: no need): the brake's
// progress deadline, a pod's lifetime deadline, an admission never taken
// up lapsing. The template reconciler gathers the sessions, calls it and
// writes what it returns.
func NextTemplateStatus(t *lullv1.SessionTemplate, sessions []lullv1.Session, now time.Time, mean time.Duration, measured bool) (lullv1.SessionTemplateStatus, time.Duration) {
	next := Summarize(t, sessions)
	policy := EffectivePolicy(t, next.Revision)
	brake := DecideBrake(t, next.Revision, sessions, now)
	room := MaxUnavailable(policy, int(next.Sessions-next.Suspended))
	if brake.Paused || meta.IsStatusConditionFalse(t.Status.Conditions, lullv1.ConditionImageAllowed) {
		room = 0 // those moving finish; nobody starts
	}
	passive := policy.Strategy == lullv1.UpdateStrategyPassive
	admitByRevision := next.Revision
	if passive {
		admitByRevision = ""
	}
	next.Wave = PlanWave(t.Status.Wave, sessions, room, now, admitByRevision)
	next.ExpectedCompletion = nil
	if moving := int(next.Stale - next.UpdatePending); measured && room > 0 && moving > 0 && !passive {
		var previous *time.Time
		if p := t.Status.ExpectedCompletion; p != nil {
			previous = &p.Time
		}
		eta := metav1.NewTime(ExpectedCompletion(moving, room, mean, now, previous))
		next.ExpectedCompletion = &eta
	}
	if passive && next.Stale > 0 {
		eta, unbounded := PassiveCompletion(sessions, next.Revision, room > 0)
		next.WithoutDeadline = int32(unbounded)
		if !eta.IsZero() {
			at := metav1.NewTime(eta)
			next.ExpectedCompletion = &at
		}
	}
	next.PausedRevision = brake.PausedRevision
	next.Failing = brake.Failing[:min(len(brake.Failing), 20)]
	setPolicyConditions(t, &next, brake)
	requeue := brake.RequeueAfter
	if at := NextLifetimeDeadline(sessions, now); !at.IsZero() {
		// A pod reaching its lifetime waits for a place in the wave.
		requeue = Soonest(requeue, at.Sub(now)+time.Second/10)
	}
	if at := NextAdmissionLapse(next.Wave, sessions); !at.IsZero() {
		// An admission never taken up is revoked and released only by a
		// plan made after it lapsed (strictly older than the TTL), and no
		// session event need come by then (sessionCounted drops the
		// reports of busy runtimes; idle ones write nothing): without this
		// the session waiting behind it would wait for a resync. One
		// lapsed already is one whose revoke did not land: try again.
		requeue = Soonest(requeue, max(at.Sub(now), 0)+time.Second)
	}
	return next, requeue
}

// setPolicyConditions sets RolloutPaused from the brake, and BreakGlass
// from spec.breakGlass against the template's revision.
func setPolicyConditions(t *lullv1.SessionTemplate, st *lullv1.SessionTemplateStatus, b Brake) {
	paused := metav1.Condition{Type: lullv1.ConditionRolloutPaused, Status: metav1.ConditionFalse, Reason: b.Reason, Message: b.Message, ObservedGeneration: t.Generation}
	if b.Paused {
		paused.Status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&st.Conditions, paused)
	bg := t.Spec.BreakGlass
	if bg == nil {
		meta.RemoveStatusCondition(&st.Conditions, lullv1.ConditionBreakGlass)
		return
	}
	by := bg.RequestedBy
	if by == "" {
		by = "unknown"
	}
	c := metav1.Condition{Type: lullv1.ConditionBreakGlass, Status: metav1.ConditionTrue, Reason: lullv1.ReasonInForce, ObservedGeneration: t.Generation,
		Message: fmt.Sprintf("break-glass for revision %s, requested by %s: %q; every stale session drains for at most %s, then is replaced", bg.Revision, by, bg.Reason, bg.Grace.Duration)}
	if bg.Revision != st.Revision {
		c.Status, c.Reason = metav1.ConditionFalse, lullv1.ReasonRevisionMismatch
		c.Message = fmt.Sprintf("spec.breakGlass names revision %s, but the template's revision is %s: it applies to nothing (the update policy applies); `lull rollout force %s` names the current one", bg.Revision, st.Revision, t.Name)
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

// Summarize counts sessions by rollout state. A session is current when its
// pod runs the template's current revision (status.templateRevision) and
// its UpToDate condition is True; stale otherwise, unless suspended;
// draining when it has a drain request outstanding.
func Summarize(t *lullv1.SessionTemplate, sessions []lullv1.Session) lullv1.SessionTemplateStatus {
	st := lullv1.SessionTemplateStatus{ObservedGeneration: t.Generation, Revision: render.TemplateRevision(t), Conditions: append([]metav1.Condition(nil), t.Status.Conditions...)}
	var blocked []string
	for i := range sessions {
		s := &sessions[i]
		st.Sessions++
		if s.Spec.Suspend {
			st.Suspended++
			continue
		}
		if s.Status.Drain != nil {
			st.Draining++
		}
		c := meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionUpToDate)
		if Current(s, st.Revision) {
			st.Current++
			continue
		}
		st.Stale++
		switch {
		case c != nil && c.Reason == lullv1.ReasonWaitingForWave:
			st.Waiting++
		case c != nil && c.Reason == lullv1.ReasonUpdatePending:
			st.UpdatePending++
		}
		if c != nil && Blocked(c.Reason) {
			blocked = append(blocked, fmt.Sprintf("%s (%s)", s.Name, c.Reason))
		}
		// Stale since its UpToDate condition left True; a session whose
		// controller has not yet seen the new revision has no such time
		// yet.
		if c != nil && c.Status != metav1.ConditionTrue {
			if since := c.LastTransitionTime; st.OldestStaleSince == nil || since.Before(st.OldestStaleSince) {
				st.OldestStaleSince = &since
			}
		}
	}
	rolledOut := metav1.Condition{Type: lullv1.ConditionRolledOut, Status: metav1.ConditionTrue, Reason: lullv1.ReasonAllCurrent,
		Message: fmt.Sprintf("%d of %d running sessions run the update revision", st.Current, st.Sessions-st.Suspended), ObservedGeneration: t.Generation}
	if st.Current < st.Sessions-st.Suspended {
		rolledOut.Status, rolledOut.Reason = metav1.ConditionFalse, lullv1.ReasonRollingOut
	}
	if len(blocked) > 0 {
		// Name the sessions that need someone while the others finish;
		// when nothing else is moving, the rollout itself is blocked.
		sort.Strings(blocked)
		if int(st.Current)+len(blocked) == int(st.Sessions-st.Suspended) {
			rolledOut.Reason = lullv1.ReasonBlocked
		}
		const shown = 5
		more := ""
		if len(blocked) > shown {
			more = fmt.Sprintf(" and %d more", len(blocked)-shown)
			blocked = blocked[:shown]
		}
		rolledOut.Message += fmt.Sprintf("; blocked: %s%s (see each session's UpToDate condition)", strings.Join(blocked, ", "), more)
	}
	meta.SetStatusCondition(&st.Conditions, rolledOut)
	return st
}
