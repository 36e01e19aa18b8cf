package rollout

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
	"lull.dev/lull/internal/lifecycle"
)

// idleFixture is a current pod whose runtime has been idle for ten minutes
// (judged idle before), under suspendAfter 5m, with its report.
func idleFixture() *fixture {
	f := newFixture()
	f.o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = newRev
	f.o.Pod.CreationTimestamp = metav1.NewTime(now.Add(-time.Hour))
	last := metav1.NewTime(now.Add(-10 * time.Minute))
	r := report(podUID, "", lullv1.RuntimeServing, 0)
	r.LastActivity, r.RefreshSeconds = &last, 10
	f.o.Session.Status.Runtime = r
	f.o.Session.Status.Lifecycle = &lullv1.LifecycleStatus{IdlePodUID: podUID, IdleSince: &last, IdleActivity: &last}
	f.o.ReportWrittenAt = now.Add(-time.Second)
	f.o.Lifecycle = lifecycle.Policy{SuspendAfter: 5 * time.Minute}
	return f
}

// withoutAReportOfItsOwn makes status.runtime name another pod than the
// fixture's, which has been ready for an hour: its runtime cannot write,
// is gone, or its report was overwritten.
func withoutAReportOfItsOwn(f *fixture) { f.o.Session.Status.Runtime.PodUID = "pod-gone" }

func idleRequest(uid types.UID, seq int64) *lullv1.DrainRequest {
	return &lullv1.DrainRequest{RequestID: drain.RequestID(uid, lullv1.DrainReasonIdle, seq), PodUID: uid, Reason: lullv1.DrainReasonIdle,
		Sequence: seq, RequestedAt: metav1.NewTime(now.Add(-time.Second))}
}

func TestIdleSessionIsDrainedThenSuspended(t *testing.T) {
	f := idleFixture()
	a := decide(f.o)
	if a.Kind != RequestDrain || a.Drain.Reason != lullv1.DrainReasonIdle || a.Drain.Sequence != 1 {
		t.Fatalf("idle past suspendAfter: %s/%s %+v; want an Idle drain request with a new sequence", a.Kind, a.Reason, a.Drain)
	}
	req := idleRequest(podUID, 1)
	outstanding(&f.o, req)
	if a := decide(f.o); a.Kind != Wait || a.Reason != lullv1.ReasonIdleCull || a.Drain == nil {
		t.Fatalf("idle drain outstanding, runtime Serving: %s/%s; want Wait/IdleCull keeping the request", a.Kind, a.Reason)
	}
	f.o.Session.Status.Runtime.State, f.o.Session.Status.Runtime.RequestID = lullv1.RuntimeDrained, req.RequestID
	a = decide(f.o)
	if a.Kind != Commit || a.Replacement == nil || a.Replacement.RequestID != req.RequestID {
		t.Fatalf("runtime Drained for the idle request: %s/%s; want Commit", a.Kind, a.Reason)
	}
	f.o.Session.Status.Replacement = a.Replacement
	if a := decide(f.o); a.Kind != SuspendSession || a.Drain == nil || a.Replacement == nil {
		t.Fatalf("idle drain committed: %s/%s; want SuspendSession, request and commitment kept", a.Kind, a.Reason)
	}
	f.o.Lifecycle = lifecycle.Policy{DeleteAfter: 5 * time.Minute}
	if a := decide(f.o); a.Kind != DeleteSession {
		t.Fatalf("idle drain committed under deleteAfter: %s/%s; want DeleteSession", a.Kind, a.Reason)
	}
}

func TestBusySessionPastItsIdleLimitIsNotDrained(t *testing.T) {
	f := idleFixture()
	f.o.Session.Status.Runtime.ActiveTurns = 1
	if a := decide(f.o); a.Kind != Wait || a.Reason != lullv1.ReasonUpToDate || a.Drain != nil {
		t.Fatalf("a turn in flight: %s/%s; want Wait/UpToDate", a.Kind, a.Reason)
	}
}

func TestActivityDuringIdleDrainWithdrawsIt(t *testing.T) {
	for name, wake := range map[string]func(f *fixture){
		"turn began":  func(f *fixture) { f.o.Session.Status.Runtime.ActiveTurns = 1 },
		"activity":    func(f *fixture) { f.o.Session.Status.Runtime.LastActivity = &metav1.Time{Time: now} },
		"report lost": withoutAReportOfItsOwn,
		"keep-alive": func(f *fixture) {
			f.o.Session.Annotations = map[string]string{lullv1.AnnotationKeepAlive: f.o.Session.Status.Drain.RequestID}
		},
		"policy gone": func(f *fixture) { f.o.Lifecycle = lifecycle.Policy{} },
	} {
		f := idleFixture()
		req := idleRequest(podUID, 1)
		outstanding(&f.o, req)
		f.o.Session.Status.Runtime.State, f.o.Session.Status.Runtime.RequestID = lullv1.RuntimeDrained, req.RequestID
		wake(f)
		a := decide(f.o)
		if a.Kind != Wait || a.Reason != lullv1.ReasonIdleCullWithdrawn || a.Drain != nil {
			t.Errorf("%s during the idle drain: %s/%s drain %+v; want the request withdrawn", name, a.Kind, a.Reason, a.Drain)
		}
		st := nextStatus(f.o, a)
		if st.Drain != nil || st.Lifecycle == nil && name != "policy gone" {
			t.Errorf("%s: status drain %+v lifecycle %+v", name, st.Drain, st.Lifecycle)
		}
	}
}

func TestKeepAliveRestartsTheIdleClock(t *testing.T) {
	f := idleFixture()
	outstanding(&f.o, idleRequest(podUID, 1))
	f.o.Session.Annotations = map[string]string{lullv1.AnnotationKeepAlive: f.o.Session.Status.Drain.RequestID}
	st := nextStatus(f.o, decide(f.o))
	if st.Lifecycle == nil || !st.Lifecycle.IdleSince.Time.Equal(now) {
		t.Fatalf("keep-alive: lifecycle %+v; want idleSince now", st.Lifecycle)
	}
	// Written back: the request is gone, and the clock holds from then.
	f.o.Session.Status = st
	f.o.Now = now.Add(time.Minute)
	if a := decide(f.o); a.Kind != Wait || a.Reason != lullv1.ReasonUpToDate {
		t.Fatalf("a minute after keep-alive: %s/%s; want no cull", a.Kind, a.Reason)
	}
}

func TestCommittedIdleCullOfAWokenSessionRestartsThePod(t *testing.T) {
	f := idleFixture()
	req := idleRequest(podUID, 1)
	outstanding(&f.o, req)
	f.o.Session.Status.Replacement = committed(podUID, lullv1.ReplacementDrained, req.RequestID)
	f.o.Session.Status.Runtime.LastActivity = &metav1.Time{Time: now} // reported after the commitment
	if a := decide(f.o); a.Kind != DeletePod || a.Replacement == nil {
		t.Fatalf("committed, then activity: %s/%s; want the committed pod replaced, the session kept", a.Kind, a.Reason)
	}
}

func TestSuspendedIdleSessionIsDeletedAfterDeleteAfter(t *testing.T) {
	f := idleFixture()
	f.o.Pod = nil
	f.o.Session.Spec.Suspend = true
	f.o.Lifecycle = lifecycle.Policy{SuspendAfter: time.Minute, DeleteAfter: 5 * time.Minute}
	if a := decide(f.o); a.Kind != DeleteSession {
		t.Fatalf("suspended, idle 10m, deleteAfter 5m: %s/%s; want DeleteSession", a.Kind, a.Reason)
	}
	f.o.Lifecycle.DeleteAfter = time.Hour
	a := decide(f.o)
	if a.Kind != Wait || a.Reason != lullv1.ReasonSuspended || a.RequeueAfter < 49*time.Minute || a.RequeueAfter > 51*time.Minute {
		t.Fatalf("deleteAfter 1h: %s/%s requeue %s; want Wait/Suspended, looked at again at the cull time", a.Kind, a.Reason, a.RequeueAfter)
	}
}

func TestLifetimeRestartDrainsWithinTheWave(t *testing.T) {
	f := idleFixture()
	f.o.Lifecycle = lifecycle.Policy{MaxLifetime: 30 * time.Minute}
	f.o.Session.Status.Runtime.ActiveTurns = 2
	f.o.Admitted = false
	if a := decide(f.o); a.Kind != Wait || a.Reason != lullv1.ReasonLifetime || a.Drain != nil {
		t.Fatalf("past maxLifetime, no place in the wave: %s/%s; want Wait/Lifetime", a.Kind, a.Reason)
	}
	f.o.Admitted = true
	a := decide(f.o)
	if a.Kind != RequestDrain || a.Drain.Reason != lullv1.DrainReasonLifetime {
		t.Fatalf("admitted: %s/%s; want a Lifetime drain request", a.Kind, a.Reason)
	}
	outstanding(&f.o, a.Drain)
	if a := decide(f.o); a.Kind != Wait || a.Drain == nil {
		t.Fatalf("lifetime drain, turns in flight: %s/%s; want Wait keeping the request", a.Kind, a.Reason)
	}
	f.o.Session.Status.Runtime.State, f.o.Session.Status.Runtime.RequestID, f.o.Session.Status.Runtime.ActiveTurns = lullv1.RuntimeDrained, a.Drain.RequestID, 0
	if a := decide(f.o); a.Kind != Commit {
		t.Fatalf("drained for the lifetime request: %s/%s; want Commit (then the pod is deleted)", a.Kind, a.Reason)
	}
	if !Admitted([]lullv1.WaveEntry{{Session: "s", Sequence: 1}}, f.o.Session) {
		t.Error("a session draining under its lifetime place must stay admitted")
	}
}

func TestPassiveStaleSessionConvergesThroughIdleCull(t *testing.T) {
	f := idleFixture()
	f.o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = oldRev
	f.o.Policy = lullv1.UpdatePolicy{Strategy: lullv1.UpdateStrategyPassive}
	a := decide(f.o)
	if a.Kind != RequestDrain || a.Drain.Reason != lullv1.DrainReasonIdle {
		t.Fatalf("Passive, stale and idle past its limit: %s/%s; want an Idle drain", a.Kind, a.Reason)
	}
	st := nextStatus(f.o, a)
	if c := findCondition(st.Conditions, lullv1.ConditionUpToDate); c == nil || c.Reason != lullv1.ReasonUpdatePending {
		t.Errorf("UpToDate during the idle drain: %+v; want UpdatePending", c)
	}
}

// A current pod, ready for an hour, with no report of its own: never
// culled, Active=Unknown RuntimeNotReporting, naming what status.runtime
// holds.
func TestNotReportingSetsActiveUnknown(t *testing.T) {
	f := idleFixture()
	withoutAReportOfItsOwn(f)
	a := decide(f.o)
	st := nextStatus(f.o, a)
	c := findCondition(st.Conditions, lullv1.ConditionActive)
	if a.Kind != Wait || a.Drain != nil || c == nil || c.Status != metav1.ConditionUnknown || c.Reason != lullv1.ReasonRuntimeNotReporting ||
		!strings.Contains(c.Message, "pod-gone") {
		t.Fatalf("no report of its own: %s/%s Active %+v; want no cull, Active=Unknown RuntimeNotReporting naming the other pod's report", a.Kind, a.Reason, c)
	}
}

// The age of a report does not count: an idle runtime writes nothing while
// nothing changes, so its report of ten minutes ago is culled on (a cull
// is a drain only a live runtime answers).
func TestOldReportOfAnIdleRuntimeIsCulledOn(t *testing.T) {
	f := idleFixture()
	f.o.ReportWrittenAt = now.Add(-10 * time.Minute)
	a := decide(f.o)
	c := findCondition(nextStatus(f.o, a).Conditions, lullv1.ConditionActive)
	if a.Kind != RequestDrain || a.Drain.Reason != lullv1.DrainReasonIdle || c == nil || c.Reason != "Idle" {
		t.Fatalf("report written 10m ago, idle 10m, suspendAfter 5m: %s/%s Active %+v; want an Idle drain, Active=False Idle", a.Kind, a.Reason, c)
	}
}

func findCondition(cs []metav1.Condition, typ string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == typ {
			return &cs[i]
		}
	}
	return nil
}

// An idle drain has no deadline; an update with one (a break-glass,
// Replace, onDrainTimeout Replace) takes over from it once the stale pod
// has its place in the wave, so a wedged runtime cannot hold a security fix
// off by never answering the idle drain.
func TestUpdateWithADeadlineTakesOverFromAnIdleDrain(t *testing.T) {
	f := idleFixture()
	f.o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = oldRev
	f.o.Policy = lullv1.UpdatePolicy{Strategy: lullv1.UpdateStrategyDrain, DrainTimeout: &metav1.Duration{Duration: 5 * time.Minute}, OnDrainTimeout: lullv1.DrainTimeoutReplace}
	outstanding(&f.o, idleRequest(podUID, 1))
	a := decide(f.o)
	if a.Kind != RequestDrain || a.Drain.Reason != lullv1.DrainReasonUpdate || a.Drain.Deadline == nil {
		t.Fatalf("stale, idle drain outstanding, update with a deadline admitted: %s/%s %+v; want an Update request with a deadline", a.Kind, a.Reason, a.Drain)
	}
	f.o.Admitted = false
	// The idle drain goes on, and the session says it waits for its place
	// (the template admits sessions that say so).
	if a := decide(f.o); a.Kind != Wait || a.Reason != lullv1.ReasonWaitingForWave || a.Drain == nil || a.Drain.Reason != lullv1.DrainReasonIdle {
		t.Fatalf("not admitted: %s/%s; want the idle drain to go on, waiting for the wave", a.Kind, a.Reason)
	}
	// Without a deadline the idle cull goes first: it moves the session too.
	f.o.Admitted = true
	f.o.Policy = lullv1.UpdatePolicy{Strategy: lullv1.UpdateStrategyDrain}
	if a := decide(f.o); a.Drain == nil || a.Drain.Reason != lullv1.DrainReasonIdle {
		t.Fatalf("Drain without a deadline: %s/%s; want the idle drain kept", a.Kind, a.Reason)
	}
}

// A lifetime restart is not started for a pod whose runtime has no report
// of its own (it could never answer and would hold its place in the wave),
// and the template's drainTimeout bounds a lifetime drain.
func TestLifetimeDrainNeedsAReportAndHonoursDrainTimeout(t *testing.T) {
	f := idleFixture()
	f.o.Lifecycle = lifecycle.Policy{MaxLifetime: 30 * time.Minute}
	withoutAReportOfItsOwn(f)
	if a := decide(f.o); a.Kind != Wait || a.Drain != nil {
		t.Fatalf("no report of its own, lifetime due: %s/%s %+v; want no drain", a.Kind, a.Reason, a.Drain)
	}
	f.o.Session.Status.Runtime.PodUID = podUID
	f.o.ReportWrittenAt = now.Add(-time.Hour) // an old report is a true one
	f.o.Session.Status.Runtime.ActiveTurns = 1
	f.o.Policy = lullv1.UpdatePolicy{Strategy: lullv1.UpdateStrategyDrain, DrainTimeout: &metav1.Duration{Duration: time.Minute}, OnDrainTimeout: lullv1.DrainTimeoutReplace}
	a := decide(f.o)
	if a.Kind != RequestDrain || a.Drain.Deadline == nil || !a.Drain.Deadline.Time.Equal(now.Add(time.Minute)) {
		t.Fatalf("lifetime drain under drainTimeout 1m: %s %+v; want a deadline a minute on", a.Kind, a.Drain)
	}
	outstanding(&f.o, a.Drain)
	f.o.Now = now.Add(2 * time.Minute)
	f.o.ReportWrittenAt = f.o.Now.Add(-time.Second)
	if a := decide(f.o); a.Kind != Commit || a.Reason != lullv1.ReasonDrainDeadlineExceeded || a.Replacement == nil || a.Replacement.RequestID != a.Drain.RequestID {
		t.Fatalf("lifetime deadline passed, onDrainTimeout Replace: %s/%s %+v; want the replacement committed for the request", a.Kind, a.Reason, a.Replacement)
	}
	f.o.Policy.OnDrainTimeout = lullv1.DrainTimeoutWait
	if a := decide(f.o); a.Kind != Wait || a.Drain == nil {
		t.Fatalf("lifetime deadline passed, onDrainTimeout Wait: %s/%s; want Wait keeping the request", a.Kind, a.Reason)
	}
}
