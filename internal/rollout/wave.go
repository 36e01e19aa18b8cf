package rollout

import (
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Waves bound how many sessions of a template move at once
// (spec.updatePolicy.maxUnavailable). The bound is kept by a ledger in the
// template's status, status.wave: a session may issue an Update drain
// request only under an entry naming it and the drain sequence number the
// request takes (Admitted). The template controller writes the ledger with
// the template's resourceVersion as a precondition, so two controllers, or
// one whose cache lags, cannot both admit into the same place; and a
// session leaves the ledger only once the API server's copy of it, as seen
// in the cache, shows the admitted request issued and the move finished,
// so a lagging cache only keeps sessions in it longer. A place no request
// took up within UnusedAdmissionTTL, or held by a session that is
// suspended, is released only once the template controller has revoked it
// on the Session itself (status.revokedAdmission, a compare-and-swap on the
// version that showed it unused) and the session refuses a revoked place:
// the session's request and the revoke race for one Session version, so
// the place is either used or released, never both. The wave counts what
// lull starts; failed pods are replaced and suspended sessions drained
// without a place.

// DefaultMaxUnavailable is maxUnavailable when the policy does not say.
var DefaultMaxUnavailable = intstr.FromString("25%")

// UnusedAdmissionTTL is how long an admission that no drain request took
// up is kept: the session may have moved on (its pod failed and was
// replaced, its template changed back) and will never issue it.
const UnusedAdmissionTTL = 2 * time.Minute

// MaxUnavailable resolves the policy's maxUnavailable against the number
// of running sessions: a count as given, a percentage rounded down; at
// least 1.
func MaxUnavailable(p lullv1.UpdatePolicy, running int) int {
	v := DefaultMaxUnavailable
	if p.MaxUnavailable != nil {
		v = *p.MaxUnavailable
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, running, false)
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// Admitted reports whether a session may issue an Update drain request now:
// the wave holds an entry for it with the sequence number the request
// takes, or it already drains under its place (an entry whose sequence it
// has issued, with its request outstanding: a re-request for a newer
// revision keeps the place). An idle drain that took the place's sequence
// number (the idle cull went first) holds the place too: an update with a
// deadline takes over from it under that place. A place the template
// controller revoked (Revoked) admits nothing, whatever the wave shows.
func Admitted(wave []lullv1.WaveEntry, s *lullv1.Session) bool {
	for _, e := range wave {
		if e.Session != s.Name {
			continue
		}
		if Revoked(e, s) {
			return false
		}
		next := s.Status.DrainSequence + 1
		d := s.Status.Drain
		return e.Sequence == next || (e.Sequence <= s.Status.DrainSequence && d != nil &&
			takesPlace(d.Reason))
	}
	return false
}

// PlanWave returns the template's next wave: the entries still held, then
// as many waiting sessions as there is room for under max, in order (idle
// first, then Ready the longest, then by name). sessions are the
// template's sessions as the cache holds them. A session waits when its
// status says so (WaitingForWave), or, when rev is given (the template's
// revision; "" under Passive), when its pod runs another template revision
// and nothing of a move is outstanding: a session admitted at once never
// has to write that it waits.
//
// An entry is released when its session is gone or being deleted, when
// the session has issued the admitted request (drain sequence at least the
// entry's) and is settled again (no drain request, no commitment, Ready),
// when it is suspended and shows no request under the place outstanding
// (the suspension's own request took over, or none is left), or when the
// session shows it revoked (Revoked: it was never taken up within
// UnusedAdmissionTTL, or the session was suspended before it took it up;
// see PlacesToRevoke). A lapsed entry, or a suspended session's unused
// one, not yet revoked is held: its session may be writing its request (a
// session suspended and resumed before its controller acted on the
// suspension still holds the place on what its Session shows).
func PlanWave(wave []lullv1.WaveEntry, sessions []lullv1.Session, max int, now time.Time, rev string) []lullv1.WaveEntry {
	byName := map[string]*lullv1.Session{}
	for i := range sessions {
		byName[sessions[i].Name] = &sessions[i]
	}
	var next []lullv1.WaveEntry
	held := map[string]bool{}
	for _, e := range wave {
		s := byName[e.Session]
		if s == nil || s.DeletionTimestamp != nil {
			continue
		}
		if Revoked(e, s) {
			continue
		}
		issued := s.Status.DrainSequence >= e.Sequence
		if issued && (settled(s) || s.Spec.Suspend && !drainsUnderPlace(s)) {
			continue
		}
		next = append(next, e)
		held[e.Session] = true
	}
	var waiting []*lullv1.Session
	for i := range sessions {
		s := &sessions[i]
		if held[s.Name] || s.Spec.Suspend || s.DeletionTimestamp != nil {
			continue
		}
		staleByRevision := rev != "" && s.Status.TemplateRevision != "" && s.Status.TemplateRevision != rev && settled(s)
		if staleByRevision || LifetimeDue(s, now) || hasConditionReason(s, lullv1.ConditionUpToDate, lullv1.ReasonWaitingForWave) {
			waiting = append(waiting, s)
		}
	}
	sort.Slice(waiting, func(i, j int) bool { return before(waiting[i], waiting[j]) })
	for _, s := range waiting {
		if len(next) >= max {
			break
		}
		next = append(next, lullv1.WaveEntry{Session: s.Name, Sequence: s.Status.DrainSequence + 1, AdmittedAt: metav1.NewTime(now.Truncate(time.Second))})
	}
	return next
}

// PlacesToRevoke returns the entries of wave to take back, on what
// sessions show (Revocable): those no drain request took up within
// UnusedAdmissionTTL, and those of suspended sessions not taken up (a
// suspended session issues no Update request, but one resumed before its
// controller acted on the suspension would, under a place released in
// between). A deleted session's place is released by PlanWave without a
// revoke. The caller revokes each on its Session, read again from the API
// server (a lagging cache may not show a request the session did issue),
// with that read's resourceVersion as a precondition (the session may be
// writing its request under the place now); PlanWave releases the place
// once the revoke shows.
func PlacesToRevoke(wave []lullv1.WaveEntry, sessions []lullv1.Session, now time.Time) []lullv1.WaveEntry {
	byName := map[string]*lullv1.Session{}
	for i := range sessions {
		byName[sessions[i].Name] = &sessions[i]
	}
	var out []lullv1.WaveEntry
	for _, e := range wave {
		if s := byName[e.Session]; s != nil && s.DeletionTimestamp == nil && Revocable(e, s, now) {
			out = append(out, e)
		}
	}
	return out
}

// Revocable reports whether the place e must be revoked on s before it is
// released: s has not taken it up (no request with e's sequence issued)
// nor shows it revoked yet, and either e was admitted more than
// UnusedAdmissionTTL before now (Lapsed) or s is suspended.
func Revocable(e lullv1.WaveEntry, s *lullv1.Session, now time.Time) bool {
	return Lapsed(e, s, now) || s.Spec.Suspend && s.Status.DrainSequence < e.Sequence && !Revoked(e, s)
}

// Lapsed reports whether s has not taken up its place e (no request with
// e's sequence issued), e was admitted more than UnusedAdmissionTTL before
// now, and s does not show it revoked yet.
func Lapsed(e lullv1.WaveEntry, s *lullv1.Session, now time.Time) bool {
	return s.Status.DrainSequence < e.Sequence && now.Sub(e.AdmittedAt.Time) > UnusedAdmissionTTL && !Revoked(e, s)
}

// drainsUnderPlace reports whether s has a request outstanding that holds
// its place (see Admitted): an Update, Lifetime, Idle or NodeDrain drain.
func drainsUnderPlace(s *lullv1.Session) bool {
	d := s.Status.Drain
	return d != nil && takesPlace(d.Reason)
}

// takesPlace reports whether a drain request of reason r holds a place in
// the wave it was issued under: an Update, Lifetime or Idle drain, and a
// NodeDrain issued under nodeDrainPolicy.wave Template (one issued under
// wave Node took no place, and holds one only if the session had it).
func takesPlace(r lullv1.DrainReason) bool {
	switch r {
	case lullv1.DrainReasonUpdate, lullv1.DrainReasonLifetime, lullv1.DrainReasonIdle, lullv1.DrainReasonNodeDrain:
		return true
	}
	return false
}

// Revoked reports whether s's status.revokedAdmission takes back the place
// e: the same sequence, admitted no later than the revoked place (a place
// of that sequence admitted after the revoke is a new one).
func Revoked(e lullv1.WaveEntry, s *lullv1.Session) bool {
	r := s.Status.RevokedAdmission
	return r != nil && r.Sequence == e.Sequence && !e.AdmittedAt.After(r.AdmittedAt.Time)
}

// NextAdmissionLapse returns when the earliest admission of wave that no
// drain request has taken up (on what sessions show) lapses
// (UnusedAdmissionTTL), zero if none: when the template must plan its wave
// again. Nothing else need happen by then (an idle fleet writes nothing),
// and the place it holds would otherwise stay taken until a resync. A
// time already past is a lapsed place whose revoke has not landed.
func NextAdmissionLapse(wave []lullv1.WaveEntry, sessions []lullv1.Session) time.Time {
	byName := map[string]*lullv1.Session{}
	for i := range sessions {
		byName[sessions[i].Name] = &sessions[i]
	}
	var next time.Time
	for _, e := range wave {
		s := byName[e.Session]
		if s == nil || s.Status.DrainSequence >= e.Sequence || Revoked(e, s) {
			continue // released at the next plan, or taken up
		}
		at := e.AdmittedAt.Add(UnusedAdmissionTTL)
		if s.Spec.Suspend {
			at = e.AdmittedAt.Time // to be revoked at once: its revoke did not land
		}
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next
}

// settled: nothing of a move is outstanding and the session is Ready.
func settled(s *lullv1.Session) bool {
	return s.Status.Drain == nil && s.Status.Replacement == nil && meta.IsStatusConditionTrue(s.Status.Conditions, lullv1.ConditionReady)
}

// before orders waiting sessions: idle ones (the runtime reports no turn
// in flight) first, then the one Ready the longest (its pod the oldest),
// then by name.
func before(a, b *lullv1.Session) bool {
	if ia, ib := idle(a), idle(b); ia != ib {
		return ia
	}
	ra, rb := readySince(a), readySince(b)
	if !ra.Equal(rb) {
		return ra.Before(rb)
	}
	return a.Name < b.Name
}

func idle(s *lullv1.Session) bool {
	r := s.Status.Runtime
	return r != nil && r.PodUID == s.Status.PodUID && r.ActiveTurns == 0
}

func readySince(s *lullv1.Session) time.Time {
	if c := meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionReady); c != nil && c.Status == metav1.ConditionTrue {
		return c.LastTransitionTime.Time
	}
	return time.Time{}.Add(1<<62 - 1) // not Ready: last
}

func hasConditionReason(s *lullv1.Session, typ, reason string) bool {
	c := meta.FindStatusCondition(s.Status.Conditions, typ)
	return c != nil && c.Reason == reason
}

// waitingForWave is the step of a stale session without a place.
func waitingForWave(o Observed, current *lullv1.DrainRequest) Action {
	if current != nil && current.Reason == lullv1.DrainReasonManual {
		// The suspension it drained for was taken back: the runtime
		// reopens while the session waits for its place.
		current = nil
	}
	return Action{Kind: Wait, Reason: lullv1.ReasonWaitingForWave, Drain: current,
		Message: fmt.Sprintf("pod %s runs revision %s; waiting for a place in the template's rollout wave (maxUnavailable)", o.Pod.Name, PodRevision(o.Pod))}
}

// LifetimeDue reports whether a running session's pod has reached its
// maximum lifetime (status.lifecycle.lifetimeDeadline), nothing of a move
// is outstanding and its runtime reports: it waits for a place in the wave
// to restart. A runtime that does not report is not drained for its
// lifetime until it reports again (decideLifecycle); a place given to it
// would be held, never taken up and given again, from every other session.
func LifetimeDue(s *lullv1.Session, now time.Time) bool {
	l := s.Status.Lifecycle
	return l != nil && l.LifetimeDeadline != nil && !now.Before(l.LifetimeDeadline.Time) && settled(s) && Reporting(s)
}

// Reporting reports whether the session's status says its current pod's
// runtime reports: its Active condition is known (True or False). It is
// Unknown while the current pod's runtime has no report of its own
// (NoReport, then RuntimeNotReporting).
func Reporting(s *lullv1.Session) bool {
	c := meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionActive)
	return c != nil && c.Status != metav1.ConditionUnknown
}

// NextLifetimeDeadline returns the earliest lifetime deadline after now
// among sessions, zero if none: when the wave must be looked at again.
func NextLifetimeDeadline(sessions []lullv1.Session, now time.Time) time.Time {
	var next time.Time
	for i := range sessions {
		l := sessions[i].Status.Lifecycle
		if l == nil || l.LifetimeDeadline == nil || !l.LifetimeDeadline.After(now) {
			continue
		}
		if next.IsZero() || l.LifetimeDeadline.Time.Before(next) {
			next = l.LifetimeDeadline.Time
		}
	}
	return next
}
