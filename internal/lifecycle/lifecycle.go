// Package lifecycle judges, from what the controller observed of one
// session, whether its runtime is active, idle or not reporting, since when
// it has been idle, and when it is culled (suspended or deleted) or its pod
// restarted for its maximum lifetime. Everything here is a pure function of
// its inputs; package rollout turns the judgement into drain steps.
//
// The culler fails safe, learning from JupyterHub's idle culler and its
// known misfires: only a report of the current pod's own runtime that no
// turn is active makes a session idle (unknown is never idle); only real
// work moves the idle clock (turns and the runtime's Bump, never probes or
// lull's own reads); a lastActivity in the future counts as the moment it
// was first seen, not as activity forever; a new pod starts a new clock; and
// an omitted or zero limit means never, with no default injected.
//
// The age of a report is not judged: a runtime writes only when what it
// reports changes (activity coalesced over its refreshSeconds), so an old
// report of an idle runtime is a true one. Nor does culling need it to be
// young: a cull is a drain request (reason Idle) that commits only on a
// Drained report answering that very request, which only a live runtime
// that has sealed its gate writes; a runtime that is dead or cannot write
// never answers, and one in a turn refuses (it reports activity at once).
// What a report cannot tell is activity of the last refreshSeconds, not
// yet written: so the cull comes refreshSeconds after the idle limit, when
// any activity before the limit has been written.
package lifecycle

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Policy is a session's effective lifecycle policy; a zero duration means
// never.
type Policy struct {
	SuspendAfter time.Duration
	DeleteAfter  time.Duration
	MaxLifetime  time.Duration
}

// culls reports whether p suspends or deletes idle sessions.
func (p Policy) culls() bool { return p.SuspendAfter > 0 || p.DeleteAfter > 0 }

// PolicyFor returns the policy of session s of template t: the session's
// spec.idle replaces the template's whole; maxLifetime is the template's.
func PolicyFor(t *lullv1.SessionTemplate, s *lullv1.Session) Policy {
	var p Policy
	idle := t.Spec.Idle
	if s.Spec.Idle != nil {
		idle = s.Spec.Idle
	}
	if idle != nil {
		p.SuspendAfter = positive(idle.SuspendAfter)
		p.DeleteAfter = positive(idle.DeleteAfter)
	}
	p.MaxLifetime = positive(t.Spec.MaxLifetime)
	return p
}

func positive(d *metav1.Duration) time.Duration {
	if d == nil || d.Duration < 0 {
		return 0
	}
	return d.Duration
}

// FirstReportGrace is how long after the current pod became ready its
// runtime may go without a report of its own before the session shows
// NotReporting. A runtime writes its first report at once when it starts;
// the grace covers a slow API server, so that every new pod does not
// raise a warning.
const FirstReportGrace = 30 * time.Second

// State is what the controller knows of a session's activity.
type State string

// The states.
const (
	// NoReport: the current pod's runtime has not reported yet: the pod
	// is not ready, or became ready less than FirstReportGrace ago.
	NoReport State = "NoReport"
	// NotReporting: the current pod has been ready for FirstReportGrace
	// and its runtime has no report of its own (none, or status.runtime
	// names another pod): it cannot write (its RBAC, a webhook), is gone,
	// or its report was overwritten. Never culled.
	NotReporting State = "NotReporting"
	// Unjudged: the runtime declares no refresh bound, so how late its
	// activity is written cannot be bounded: never culled.
	Unjudged State = "Unjudged"
	// Active: the report says turns are active.
	Active State = "Active"
	// Idle: the report says no turn is active.
	Idle State = "Idle"
	// Suspended: the session is suspended and its pod gone.
	Suspended State = "Suspended"
)

// Observed is what Judge looks at.
type Observed struct {
	Now     time.Time
	Policy  Policy
	Session *lullv1.Session
	// Pod is the session's pod, nil when it has none.
	Pod *corev1.Pod
	// ReportWrittenAt is when the API server last saw status.runtime
	// written (the time of the managed-fields entry that owns it); zero if
	// unknown. Against the report's own reportedAt it shows how far the
	// runtime's clock is off (see serverTime); it is not a freshness
	// check.
	ReportWrittenAt time.Time
	// Woken: the session's user asked to keep it (lull.dev/keep-alive
	// naming the outstanding Idle request): activity now.
	Woken bool
}

// Judgement is Judge's answer.
type Judgement struct {
	State State
	// Status is what status.lifecycle must hold; nil when there is nothing
	// to say (no policy and no idle clock).
	Status *lullv1.LifecycleStatus
	// ReportDue is, while the current pod's runtime has no report of its
	// own and the pod is ready, when it became (NotReporting) or becomes
	// (NoReport) NotReporting; zero otherwise.
	ReportDue time.Time
	// CullDue: Status.CullAt has come; CullAction says what to do.
	CullDue bool
	// LifetimeDue: the pod has reached its maximum lifetime.
	LifetimeDue bool
	// NextCheck is the earliest future time at which the judgement
	// changes by the clock alone (a report going stale, a cull, a
	// lifetime deadline); zero if none.
	NextCheck time.Time
}

// Judge returns the session's lifecycle judgement at o.Now.
func Judge(o Observed) Judgement {
	s, pod, now := o.Session, o.Pod, o.Now
	prev := s.Status.Lifecycle
	if prev == nil {
		prev = &lullv1.LifecycleStatus{}
	}
	st := &lullv1.LifecycleStatus{}
	var j Judgement

	running := pod != nil && pod.DeletionTimestamp == nil
	switch {
	case s.Spec.Suspend && !running:
		j.State = Suspended
		// A suspended session stays idle: its clock runs on from when it
		// went idle, or starts now if it was never judged idle. Like a
		// running one's, it runs only under a policy that culls: a clock
		// started when a session was suspended by hand, with no policy,
		// would have deleteAfter set months later delete it at once.
		st.IdlePodUID = prev.IdlePodUID
		if o.Policy.culls() {
			st.IdleActivity, st.IdleSince = prev.IdleActivity, prev.IdleSince
			if st.IdleSince == nil {
				st.IdleSince = stamp(now)
			}
		}
	case !running:
		j.State = NoReport
	default:
		j.State, j.ReportDue = report(o)
		st.IdlePodUID = pod.UID
		if j.State == NoReport || j.State == NotReporting {
			// Until the pod's runtime reports, the clock of the pod
			// judged last is kept: the first report starts this pod's.
			st.IdlePodUID = prev.IdlePodUID
		}
		if j.State == Idle && o.Policy.culls() {
			// The idle clock runs only under a policy that culls: without
			// one no decision reads it, and recording it would cost a
			// status write per change of activity, doubling the
			// runtime's own (status.runtime.lastActivity shows it). A
			// policy set later starts the clock then, so enabling one
			// never culls at once sessions idle since long before.
			st.IdleActivity = s.Status.Runtime.LastActivity.DeepCopy()
			st.IdleSince = idleSince(o, prev)
		}
		if !s.Spec.Suspend && o.Policy.MaxLifetime > 0 {
			st.LifetimeDeadline = stamp(pod.CreationTimestamp.Add(o.Policy.MaxLifetime))
			j.LifetimeDue = !now.Before(st.LifetimeDeadline.Time)
		}
	}

	if st.IdleSince != nil && (j.State == Idle || j.State == Suspended) {
		since := st.IdleSince.Time
		if j.State == Idle {
			// Activity of the last refreshSeconds may not be written yet:
			// wait until any before the limit must have been.
			since = since.Add(time.Duration(s.Status.Runtime.RefreshSeconds) * time.Second)
		}
		switch {
		case j.State == Idle && !s.Spec.Suspend && o.Policy.SuspendAfter > 0:
			st.CullAction, st.CullAt = lullv1.IdleSuspend, stamp(since.Add(o.Policy.SuspendAfter))
		case o.Policy.DeleteAfter > 0:
			st.CullAction, st.CullAt = lullv1.IdleDelete, stamp(since.Add(o.Policy.DeleteAfter))
		}
		j.CullDue = st.CullAt != nil && !now.Before(st.CullAt.Time)
	}

	for _, t := range []*metav1.Time{st.CullAt, st.LifetimeDeadline} {
		if t != nil && t.After(now) && (j.NextCheck.IsZero() || t.Time.Before(j.NextCheck)) {
			j.NextCheck = t.Time
		}
	}
	if !j.ReportDue.IsZero() && j.ReportDue.After(now) && (j.NextCheck.IsZero() || j.ReportDue.Before(j.NextCheck)) {
		j.NextCheck = j.ReportDue
	}
	if *st != (lullv1.LifecycleStatus{}) {
		j.Status = st
	}
	return j
}

// report judges the runtime report of the running pod: its state and, for
// a pod with no report of its own, when it is due (see
// Judgement.ReportDue). The report's age does not count (see the package
// doc).
func report(o Observed) (State, time.Time) {
	r, pod := o.Session.Status.Runtime, o.Pod
	switch {
	case r == nil || r.PodUID != pod.UID:
		ready := readySince(pod)
		if ready.IsZero() {
			return NoReport, time.Time{}
		}
		due := ready.Add(FirstReportGrace)
		if o.Now.Before(due) {
			return NoReport, due
		}
		return NotReporting, due
	case r.ActiveTurns > 0:
		return Active, time.Time{}
	case r.RefreshSeconds <= 0:
		return Unjudged, time.Time{}
	}
	return Idle, time.Time{}
}

// readySince returns when pod last became ready, zero if it is not.
func readySince(pod *corev1.Pod) time.Time {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			if c.LastTransitionTime.IsZero() {
				return pod.CreationTimestamp.Time
			}
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// idleSince returns since when an idle running session has been idle,
// given the lifecycle status last written (prev).
func idleSince(o Observed, prev *lullv1.LifecycleStatus) *metav1.Time {
	now, pod := o.Now, o.Pod
	activity := o.Session.Status.Runtime.LastActivity
	samePod := prev.IdlePodUID == pod.UID
	switch {
	case o.Woken:
		return stamp(now)
	case samePod && prev.IdleSince != nil && timeEqual(prev.IdleActivity, activity):
		// Nothing happened since it was judged: the clock holds, even for
		// a lastActivity in the future (first seen at prev.IdleSince).
		return prev.IdleSince.DeepCopy()
	case !samePod:
		// The pod's first report: its clock starts now, whatever the
		// runtime says about before (a previous pod's activity included).
		return stamp(now)
	case prev.IdleSince == nil:
		// First seen idle after being active or without a report: the clock
		// starts now, not at a lastActivity that may be long past (a
		// leased turn whose client vanished ends by expiry, which is not
		// activity): a session is culled no sooner than the limit after it
		// was last seen busy.
		return stamp(now)
	}
	activity = serverTime(o, activity)
	switch {
	case activity == nil && prev.IdleSince != nil:
		// The runtime lost its lastActivity (restarted in its pod, its
		// memory gone): nothing happened, and the clock holds.
		return prev.IdleSince.DeepCopy()
	case activity == nil || activity.After(now):
		// No activity yet, or a time in the future (clock skew, forgery):
		// counted as now, and held from now on while it stays the same.
		return stamp(now)
	case prev.IdleSince != nil && activity.Before(prev.IdleSince):
		// Activity moved back: it cannot make the session idle for longer.
		return prev.IdleSince.DeepCopy()
	}
	return stamp(activity.Time)
}

// serverTime returns activity, a time the runtime stamped with its own
// clock, on the API server's clock: shifted by how far the runtime's clock
// is off, which the report shows when the API server's time of its last
// write (ReportWrittenAt) and the runtime's time of that same write
// (reportedAt) are both known. A runtime clock behind the server's would
// otherwise make every activity look old: a session culled the moment a
// turn ends, and a turn attempted during an idle drain not waking it. A
// forged reportedAt can only move activity as a forged lastActivity can
// (a time in the future counts as first seen).
func serverTime(o Observed, activity *metav1.Time) *metav1.Time {
	r := o.Session.Status.Runtime
	if activity == nil || r.ReportedAt == nil || o.ReportWrittenAt.IsZero() {
		return activity
	}
	v := metav1.NewTime(activity.Add(o.ReportWrittenAt.Sub(r.ReportedAt.Time)))
	return &v
}

func stamp(t time.Time) *metav1.Time {
	v := metav1.NewTime(t.Truncate(time.Second))
	return &v
}

func timeEqual(a, b *metav1.Time) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Equal(b)
}
