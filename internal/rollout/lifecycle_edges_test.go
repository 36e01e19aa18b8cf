package rollout

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/lifecycle"
)

const (
	oldTemplateRev = "tmpl-old"
	newTemplateRev = "tmpl-new"
)

// staleIdleDrainFixture: a stale pod (pod and template revision) whose
// runtime is being drained for idleness (request sequence 1, its fresh
// report Serving: it has not answered), under a Drain policy whose update
// has a deadline (drainTimeout 5m, onDrainTimeout Replace, as a
// break-glass makes it).
func staleIdleDrainFixture() *fixture {
	f := idleFixture()
	f.o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = oldRev
	f.o.Pod.Labels[lullv1.LabelTemplateRevision] = oldTemplateRev
	f.o.Policy = lullv1.UpdatePolicy{Strategy: lullv1.UpdateStrategyDrain,
		DrainTimeout: &metav1.Duration{Duration: 5 * time.Minute}, OnDrainTimeout: lullv1.DrainTimeoutReplace}
	outstanding(&f.o, idleRequest(podUID, 1))
	return f
}

// written returns the session as the controller's status write of a
// leaves it.
func written(o Observed, a Action) lullv1.Session {
	s := o.Session.DeepCopy()
	s.Status = nextStatus(o, a)
	return *s
}

// An update with a deadline takes over an idle drain of a stale pod "once
// the session has its place in the wave" (docs/lifecycle.md), so a runtime
// that never answers the idle drain cannot hold a security fix off. The
// place must be reachable: the template's wave has to admit a stale session
// whose idle drain is outstanding, and an admission the idle drain took up
// (its sequence) must still count as the session's place.
func TestStaleSessionInAnIdleDrainGetsItsPlaceForAnUpdateWithADeadline(t *testing.T) {
	t.Run("idle drain first, then the wave", func(t *testing.T) {
		f := staleIdleDrainFixture()
		f.o.Admitted = false // the wave has no entry for it yet
		s := written(f.o, decide(f.o))
		wave := PlanWave(nil, []lullv1.Session{s}, 1, now, newTemplateRev)
		if !Admitted(wave, &s) {
			t.Fatalf("stale session with an unanswered idle drain, update with a deadline, room in the wave: wave %+v, UpToDate %+v; "+
				"want it admitted, or the update never takes over", wave, findCondition(s.Status.Conditions, lullv1.ConditionUpToDate))
		}
		f.o.Session, f.o.Admitted = &s, true
		if a := decide(f.o); a.Kind != RequestDrain || a.Drain.Reason != lullv1.DrainReasonUpdate || a.Drain.Deadline == nil {
			t.Fatalf("admitted: %s/%s %+v; want the Update request with its deadline", a.Kind, a.Reason, a.Drain)
		}
	})
	t.Run("admitted, then the idle drain took the place's sequence", func(t *testing.T) {
		// Admitted under a policy without a deadline: the idle cull went
		// first and issued sequence 1, the place's. Then a break-glass.
		f := staleIdleDrainFixture()
		wave := []lullv1.WaveEntry{{Session: "s", Sequence: 1, AdmittedAt: metav1.NewTime(now.Add(-time.Minute))}}
		f.o.Admitted = Admitted(wave, f.o.Session) // as the reconciler computes it
		s := written(f.o, decide(f.o))
		next := PlanWave(wave, []lullv1.Session{s}, 1, now, newTemplateRev)
		if len(next) != 1 {
			t.Fatalf("wave %+v; want the session's place kept", next)
		}
		if !Admitted(next, &s) {
			t.Fatalf("the session holds a place in the wave (%+v) that its idle drain took up, but is not admitted: the place is held and "+
				"the update with a deadline never takes over", next)
		}
	})
}

// "A pod whose runtime has no report of its own is not drained for its
// lifetime until it reports: it could not answer, and would hold its place
// in the wave from every other session." The wave must not give it that
// place either:
// an admission it never takes up lapses after UnusedAdmissionTTL, and it
// is admitted again, first (its last report said no turn), ahead of every
// session that could restart.
func TestNotReportingSessionDoesNotHoldTheLifetimeWave(t *testing.T) {
	lifetimeDue := func(name string, turns int32, reporting bool) lullv1.Session {
		f := idleFixture()
		f.o.Session.Name = name
		f.o.Lifecycle = lifecycle.Policy{MaxLifetime: 30 * time.Minute} // the pod is an hour old
		f.o.Session.Status.Runtime.ActiveTurns = turns
		f.o.Session.Status.PodUID = podUID
		f.o.Admitted = false
		if !reporting {
			withoutAReportOfItsOwn(f)
		}
		a := decide(f.o)
		if a.Kind != Wait || a.Drain != nil {
			t.Fatalf("%s: %s/%s; want a wait for a place (or a report)", name, a.Kind, a.Reason)
		}
		return written(f.o, a)
	}
	silent := lifetimeDue("a-silent", 0, false)
	busy := lifetimeDue("b-busy", 2, true)
	if c := findCondition(silent.Status.Conditions, lullv1.ConditionActive); c == nil || c.Reason != lullv1.ReasonRuntimeNotReporting {
		t.Fatalf("precondition: the silent session's Active condition %+v, want RuntimeNotReporting", c)
	}
	sessions := []lullv1.Session{silent, busy}
	var wave []lullv1.WaveEntry
	at := now
	for range 5 {
		// The template controller revokes each lapsed place on its
		// session before it plans (its compare-and-swap lands: nobody
		// took the place up).
		for _, e := range PlacesToRevoke(wave, sessions, at) {
			for i := range sessions {
				if sessions[i].Name == e.Session {
					sessions[i].Status.RevokedAdmission = &lullv1.RevokedAdmission{Sequence: e.Sequence, AdmittedAt: e.AdmittedAt}
				}
			}
		}
		wave = PlanWave(wave, sessions, 1, at, "")
		at = at.Add(UnusedAdmissionTTL + time.Second)
	}
	for _, e := range wave {
		if e.Session == silent.Name {
			t.Fatalf("wave %+v: the non-reporting session holds the only place, which it cannot take up, and %s never restarts", wave, busy.Name)
		}
	}
	if len(wave) != 1 || wave[0].Session != busy.Name {
		t.Fatalf("wave %+v, want %s admitted", wave, busy.Name)
	}
}

// Under Passive the update never moves a stale pod, whatever drainTimeout
// and onDrainTimeout say (they bound lifetime drains there): it cannot take
// over from an idle cull, which is how a passive stale session converges.
// A session admitted to the wave (for its lifetime) and idle past its limit
// must still be drained, and an idle drain outstanding must not be
// withdrawn as an Update request left from another strategy.
func TestPassiveStaleSessionIsCulledWhateverItsDrainTimeout(t *testing.T) {
	passive := lullv1.UpdatePolicy{Strategy: lullv1.UpdateStrategyPassive,
		DrainTimeout: &metav1.Duration{Duration: 5 * time.Minute}, OnDrainTimeout: lullv1.DrainTimeoutReplace}
	t.Run("idle and past its lifetime, admitted", func(t *testing.T) {
		f := idleFixture()
		f.o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = oldRev
		f.o.Policy = passive
		f.o.Lifecycle.MaxLifetime = 30 * time.Minute // the pod is an hour old
		f.o.Admitted = true
		if a := decide(f.o); a.Kind != RequestDrain || a.Drain == nil {
			t.Fatalf("Passive, stale, idle past suspendAfter and past maxLifetime, admitted: %s/%s; want a drain (Idle or Lifetime), not nothing", a.Kind, a.Reason)
		}
	})
	t.Run("idle drain outstanding, admitted", func(t *testing.T) {
		f := idleFixture()
		f.o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = oldRev
		f.o.Policy = passive
		f.o.Admitted = true
		outstanding(&f.o, idleRequest(podUID, 1))
		if a := decide(f.o); a.Drain == nil || a.Drain.Reason != lullv1.DrainReasonIdle {
			t.Fatalf("Passive, idle drain outstanding: %s/%s drain %+v; want the idle drain kept", a.Kind, a.Reason, a.Drain)
		}
	})
}

// "The template's updatePolicy.drainTimeout and onDrainTimeout bound a
// lifetime drain as they bound an update's", and "a deadline added while a
// request is outstanding (a break-glass, a new drainTimeout) is set to the
// whole timeout from then, on the same request ID". A lifetime drain
// outstanding without a deadline (a runtime holding a turn) when the
// template gets a drainTimeout must get the deadline, or it holds its place
// in the wave for ever.
func TestDrainTimeoutSetDuringALifetimeDrainBoundsIt(t *testing.T) {
	f := idleFixture()
	f.o.Lifecycle = lifecycle.Policy{MaxLifetime: 30 * time.Minute}
	f.o.Session.Status.Runtime.ActiveTurns = 1
	a := decide(f.o)
	if a.Kind != RequestDrain || a.Drain.Reason != lullv1.DrainReasonLifetime || a.Drain.Deadline != nil {
		t.Fatalf("lifetime due, no drainTimeout: %s/%s %+v; want a Lifetime request without a deadline", a.Kind, a.Reason, a.Drain)
	}
	outstanding(&f.o, a.Drain)
	id := a.Drain.RequestID
	f.o.Policy.DrainTimeout = &metav1.Duration{Duration: time.Minute}
	f.o.Policy.OnDrainTimeout = lullv1.DrainTimeoutReplace
	a = decide(f.o)
	if a.Drain == nil || a.Drain.RequestID != id || a.Drain.Deadline == nil || !a.Drain.Deadline.Time.Equal(now.Add(time.Minute)) {
		t.Fatalf("drainTimeout 1m set during the lifetime drain: %s/%s %+v; want request %s kept with a deadline a minute on", a.Kind, a.Reason, a.Drain, id)
	}
	outstanding(&f.o, a.Drain)
	f.o.Now = now.Add(2 * time.Minute)
	f.o.ReportWrittenAt = f.o.Now.Add(-time.Second)
	if a := decide(f.o); a.Kind != Commit || a.Reason != lullv1.ReasonDrainDeadlineExceeded {
		t.Fatalf("past the added deadline: %s/%s; want Commit", a.Kind, a.Reason)
	}
}

// A lifetime drain is not withdrawn when its runtime goes silent: a
// runtime writes nothing while nothing changes (a turn that runs on), so
// silence says nothing of whether it can answer. The drain keeps its
// place; the template's drainTimeout and onDrainTimeout bound it.
func TestLifetimeDrainOfASilentRuntimeIsBoundByItsDeadline(t *testing.T) {
	f := idleFixture()
	f.o.Lifecycle = lifecycle.Policy{MaxLifetime: 30 * time.Minute}
	f.o.Session.Status.Runtime.ActiveTurns = 1
	a := decide(f.o)
	if a.Kind != RequestDrain || a.Drain.Reason != lullv1.DrainReasonLifetime {
		t.Fatalf("lifetime due: %s/%s; want a Lifetime request", a.Kind, a.Reason)
	}
	outstanding(&f.o, a.Drain)
	f.o.ReportWrittenAt = now.Add(-time.Hour) // nothing written for an hour
	f.o.Now = now.Add(time.Hour)
	if a := decide(f.o); a.Kind != Wait || a.Drain == nil || a.Drain.Reason != lullv1.DrainReasonLifetime {
		t.Fatalf("lifetime drain, runtime silent for an hour, no deadline: %s/%s drain %+v; want it kept", a.Kind, a.Reason, a.Drain)
	}
	// With a deadline that replaces the pod, the drain is kept: the
	// deadline bounds it.
	f = idleFixture()
	f.o.Lifecycle = lifecycle.Policy{MaxLifetime: 30 * time.Minute}
	f.o.Session.Status.Runtime.ActiveTurns = 1
	f.o.Policy.DrainTimeout, f.o.Policy.OnDrainTimeout = &metav1.Duration{Duration: time.Minute}, lullv1.DrainTimeoutReplace
	a = decide(f.o)
	outstanding(&f.o, a.Drain)
	f.o.ReportWrittenAt = now.Add(-time.Hour)
	if a := decide(f.o); a.Drain == nil || a.Drain.Reason != lullv1.DrainReasonLifetime {
		t.Errorf("lifetime drain with a Replace deadline, runtime silent: %s/%s; want it kept until its deadline", a.Kind, a.Reason)
	}
	f.o.Now = now.Add(2 * time.Minute)
	if a := decide(f.o); a.Kind != Commit || a.Reason != lullv1.ReasonDrainDeadlineExceeded {
		t.Errorf("past the deadline, onDrainTimeout Replace, runtime silent: %s/%s; want Commit", a.Kind, a.Reason)
	}
}
