package lifecycle

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

func at(d time.Duration) *metav1.Time { v := metav1.NewTime(t0.Add(d)); return &v }

func pod(uid types.UID, created time.Duration) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "s-0", UID: uid, CreationTimestamp: *at(created)}}
}

// session returns a running session whose runtime in pod "p1" reported
// turns active with lastActivity, refreshing every 10 s.
func session(turns int32, lastActivity *metav1.Time) *lullv1.Session {
	return &lullv1.Session{Status: lullv1.SessionStatus{Runtime: &lullv1.RuntimeReport{
		PodUID: "p1", State: lullv1.RuntimeServing, ActiveTurns: turns, LastActivity: lastActivity, RefreshSeconds: 10,
	}}}
}

func judge(s *lullv1.Session, p *corev1.Pod, now time.Duration, written time.Duration, policy Policy) Judgement {
	return Judge(Observed{Now: t0.Add(now), Policy: policy, Session: s, Pod: p, ReportWrittenAt: t0.Add(written)})
}

var suspend5m = Policy{SuspendAfter: 5 * time.Minute}

func TestBusySessionIsNeverIdle(t *testing.T) {
	s := session(1, at(-time.Hour))
	j := judge(s, pod("p1", -2*time.Hour), 0, -time.Second, suspend5m)
	if j.State != Active || j.CullDue || j.Status == nil || j.Status.IdleSince != nil || j.Status.CullAt != nil {
		t.Fatalf("a turn in flight for an hour with no activity: %+v %+v; want Active, no idle clock, no cull", j, j.Status)
	}
}

func TestIdleClockStartsWhenFirstSeenIdleNotAtAnOldActivity(t *testing.T) {
	// Judged before while active; the turn ended by lease expiry, which
	// leaves lastActivity at its beginning two hours ago.
	s := session(0, at(-2*time.Hour))
	s.Status.Lifecycle = &lullv1.LifecycleStatus{IdlePodUID: "p1"}
	j := judge(s, pod("p1", -3*time.Hour), 0, -time.Second, suspend5m)
	if j.State != Idle || !j.Status.IdleSince.Equal(at(0)) || j.CullDue {
		t.Fatalf("first seen idle: %+v due=%v; want idleSince now, no cull for suspendAfter", j.Status, j.CullDue)
	}
}

func TestIdleClockFollowsActivityAndCullsAfterTheLimit(t *testing.T) {
	// Idle since -12m, then a Bump at -10m reported.
	s := session(0, at(-10*time.Minute))
	s.Status.Lifecycle = &lullv1.LifecycleStatus{IdlePodUID: "p1", IdleSince: at(-12 * time.Minute), IdleActivity: at(-12 * time.Minute)}
	j := judge(s, pod("p1", -time.Hour), 0, -time.Second, suspend5m)
	if j.State != Idle || !j.Status.IdleSince.Equal(at(-10*time.Minute)) || !j.CullDue || j.Status.CullAction != lullv1.IdleSuspend {
		t.Fatalf("idle for 10m with suspendAfter 5m: %+v %+v; want Idle since the last activity, Suspend due", j, j.Status)
	}
	if !j.Status.CullAt.Equal(at(-5*time.Minute + 10*time.Second)) {
		t.Errorf("cullAt = %v, want idleSince + 5m + the report's 10s refresh bound", j.Status.CullAt)
	}
}

func TestNewPodStartsANewIdleClock(t *testing.T) {
	// After a resume the old pod's idle clock and lastActivity are
	// ignored: the new pod's first idle report starts the clock now.
	s := session(0, at(-3*time.Hour))
	s.Status.Runtime.PodUID = "p2"
	s.Status.Lifecycle = &lullv1.LifecycleStatus{IdlePodUID: "p1", IdleSince: at(-3 * time.Hour), IdleActivity: at(-3 * time.Hour)}
	j := judge(s, pod("p2", -time.Minute), 0, -time.Second, suspend5m)
	if !j.Status.IdleSince.Equal(at(0)) || j.CullDue || j.Status.IdlePodUID != "p2" {
		t.Fatalf("new pod: %+v; want idleSince now, no cull due", j.Status)
	}
}

func TestFutureLastActivityCountsAsFirstSeenAndHolds(t *testing.T) {
	future := at(100 * 24 * time.Hour)
	s := session(0, future)
	s.Status.Lifecycle = &lullv1.LifecycleStatus{IdlePodUID: "p1"}
	first := judge(s, pod("p1", -time.Hour), 0, -time.Second, suspend5m)
	if !first.Status.IdleSince.Equal(at(0)) {
		t.Fatalf("future lastActivity: idleSince %v, want now", first.Status.IdleSince)
	}
	// Written back, then judged six minutes later with the same report.
	s.Status.Lifecycle = first.Status
	later := judge(s, pod("p1", -time.Hour), 6*time.Minute, 6*time.Minute-time.Second, suspend5m)
	if !later.Status.IdleSince.Equal(at(0)) || !later.CullDue {
		t.Fatalf("six minutes on: %+v due=%v; a future lastActivity must not exempt the session", later.Status, later.CullDue)
	}
}

// A report is not judged by its age: a runtime writes only when what it
// reports changes, so an idle runtime's report of an hour ago is true, and
// the session is culled on it (the cull is a drain that only a live
// runtime answers). The cull waits out the report's refresh bound past the
// limit: activity of the last refresh may not be written yet.
func TestOldReportOfAnIdleRuntimeIsIdle(t *testing.T) {
	s := session(0, at(-time.Hour))
	s.Status.Lifecycle = &lullv1.LifecycleStatus{IdlePodUID: "p1", IdleSince: at(-time.Hour), IdleActivity: at(-time.Hour)}
	j := judge(s, pod("p1", -2*time.Hour), 0, -time.Hour, suspend5m)
	if j.State != Idle || !j.CullDue || !j.Status.IdleSince.Equal(at(-time.Hour)) {
		t.Fatalf("report last written an hour ago, idle since: %+v %+v; want Idle, cull due", j, j.Status)
	}
	s.Status.Lifecycle = &lullv1.LifecycleStatus{IdlePodUID: "p1", IdleSince: at(-5 * time.Minute), IdleActivity: at(-time.Hour)}
	j = judge(s, pod("p1", -2*time.Hour), 0, -time.Hour, suspend5m)
	if j.CullDue || !j.Status.CullAt.Equal(at(10*time.Second)) || !j.NextCheck.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("idle exactly 5m, refresh 10s: %+v %+v; want the cull 10s later, looked at again then", j, j.Status)
	}
}

// ready returns pod uid, created at created and ready since readyAt.
func ready(uid types.UID, created, readyAt time.Duration) *corev1.Pod {
	p := pod(uid, created)
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: *at(readyAt)}}
	return p
}

// A current pod with no report of its own (none, or status.runtime names
// another pod) is NoReport while its runtime may still be starting, then
// NotReporting: never idle, never culled, the previous clock kept.
func TestPodWithoutAReportOfItsOwn(t *testing.T) {
	s := session(0, at(-time.Hour)) // pod p1's report
	s.Status.Lifecycle = &lullv1.LifecycleStatus{IdlePodUID: "p1", IdleSince: at(-time.Hour), IdleActivity: at(-time.Hour)}
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		want    State
		due     time.Time
		nextDue bool
	}{
		{"not ready", pod("p2", -time.Hour), NoReport, time.Time{}, false},
		{"ready 10s ago", ready("p2", -time.Minute, -10*time.Second), NoReport, t0.Add(20 * time.Second), true},
		{"ready 31s ago", ready("p2", -time.Minute, -31*time.Second), NotReporting, t0.Add(-time.Second), false},
	} {
		j := judge(s, tc.pod, 0, -time.Hour, suspend5m)
		if j.State != tc.want || !j.ReportDue.Equal(tc.due) || j.CullDue || j.Status.IdleSince != nil || j.Status.IdlePodUID != "p1" {
			t.Errorf("%s: %+v %+v; want %s, report due %v, no idle clock, p1's clock kept", tc.name, j, j.Status, tc.want, tc.due)
		}
		if tc.nextDue && !j.NextCheck.Equal(tc.due) {
			t.Errorf("%s: next check %v; want it when the report is due, %v", tc.name, j.NextCheck, tc.due)
		}
	}
	s.Status.Runtime = nil
	if j := judge(s, ready("p1", -time.Hour, -time.Minute), 0, 0, suspend5m); j.State != NotReporting || j.CullDue {
		t.Errorf("no report at all, ready a minute: %+v; want NotReporting, no cull", j)
	}
}

// A runtime clock ahead of the API server's does not postpone the cull:
// its lastActivity is shifted back by the skew its reportedAt shows.
func TestRuntimeClockAheadDoesNotPostponeTheCull(t *testing.T) {
	s := session(0, nil)
	s.Status.Lifecycle = &lullv1.LifecycleStatus{IdlePodUID: "p1", IdleSince: at(-12 * time.Minute), IdleActivity: at(-12 * time.Minute)}
	// Activity ten minutes ago, stamped by a clock an hour ahead.
	s.Status.Runtime.LastActivity = at(-10*time.Minute + time.Hour)
	s.Status.Runtime.ReportedAt = at(-10*time.Minute + time.Hour)
	j := judge(s, pod("p1", -2*time.Hour), 0, -10*time.Minute, suspend5m)
	if j.State != Idle || !j.Status.IdleSince.Equal(at(-10*time.Minute)) || !j.CullDue {
		t.Fatalf("runtime clock an hour ahead: %+v due=%v; want idle since 10m ago, cull due", j.Status, j.CullDue)
	}
}

func TestNoRefreshIntervalIsNeverCulled(t *testing.T) {
	s := session(0, at(-time.Hour))
	s.Status.Runtime.RefreshSeconds = 0
	j := judge(s, pod("p1", -2*time.Hour), 0, 0, suspend5m)
	if j.State != Unjudged || j.CullDue {
		t.Fatalf("runtime without a refresh interval: %+v; want Unjudged, never culled", j)
	}
}

func TestNoPolicyNeverCulls(t *testing.T) {
	s := session(0, at(-100*time.Hour))
	s.Status.Lifecycle = &lullv1.LifecycleStatus{IdlePodUID: "p1"}
	j := judge(s, pod("p1", -200*time.Hour), 0, -time.Second, Policy{})
	if j.CullDue || j.LifetimeDue || j.Status.CullAt != nil || j.Status.LifetimeDeadline != nil {
		t.Fatalf("no policy: %+v %+v; want nothing due", j, j.Status)
	}
}

// Without a policy that culls, activity is not mirrored into the status:
// the judgement of an idle session is the same whatever its runtime's
// lastActivity, so a runtime's activity reports cost no controller write.
// A policy set later starts the clock then.
func TestNoCullingPolicyRunsNoIdleClock(t *testing.T) {
	for _, p := range []Policy{{}, {MaxLifetime: time.Hour}} {
		s := session(0, at(-10*time.Minute))
		s.Status.Lifecycle = &lullv1.LifecycleStatus{IdlePodUID: "p1"}
		first := judge(s, pod("p1", -20*time.Minute), 0, -time.Second, p)
		s.Status.Runtime.LastActivity = at(-time.Minute)
		later := judge(s, pod("p1", -20*time.Minute), time.Minute, -time.Second, p)
		if first.State != Idle || first.Status.IdleSince != nil || first.Status.IdleActivity != nil {
			t.Errorf("policy %+v: %+v; want Idle with no idle clock", p, first.Status)
		}
		if !reflect.DeepEqual(first.Status, later.Status) {
			t.Errorf("policy %+v: status changes with activity alone: %+v then %+v", p, first.Status, later.Status)
		}
	}
	s := session(0, at(-10*time.Hour))
	s.Status.Lifecycle = &lullv1.LifecycleStatus{IdlePodUID: "p1"}
	j := judge(s, pod("p1", -20*time.Hour), 0, -time.Second, suspend5m)
	if j.CullDue || !j.Status.IdleSince.Equal(at(0)) {
		t.Fatalf("policy set on a session idle for 10 h: %+v due=%v; want the clock started now, no cull", j.Status, j.CullDue)
	}
}

func TestWokenRestartsTheClock(t *testing.T) {
	s := session(0, at(-time.Hour))
	s.Status.Lifecycle = &lullv1.LifecycleStatus{IdlePodUID: "p1", IdleSince: at(-time.Hour), IdleActivity: at(-time.Hour)}
	j := Judge(Observed{Now: t0, Policy: suspend5m, Session: s, Pod: pod("p1", -2*time.Hour), ReportWrittenAt: t0, Woken: true})
	if j.CullDue || !j.Status.IdleSince.Equal(at(0)) {
		t.Fatalf("woken: %+v; want the clock restarted now", j.Status)
	}
}

func TestSuspendedSessionIsDeletedAfterDeleteAfter(t *testing.T) {
	s := session(0, nil)
	s.Spec.Suspend = true
	s.Status.Lifecycle = &lullv1.LifecycleStatus{IdlePodUID: "p1", IdleSince: at(-2 * time.Hour)}
	p := Policy{SuspendAfter: 5 * time.Minute, DeleteAfter: time.Hour}
	j := judge(s, nil, 0, 0, p)
	if j.State != Suspended || !j.CullDue || j.Status.CullAction != lullv1.IdleDelete || !j.Status.CullAt.Equal(at(-time.Hour)) {
		t.Fatalf("suspended, idle 2h, deleteAfter 1h: %+v %+v; want Delete due at idleSince+1h", j, j.Status)
	}
	// Suspended without an idle clock (suspended by hand while active):
	// the clock starts when first seen suspended.
	s.Status.Lifecycle = nil
	j = judge(s, nil, 0, 0, p)
	if j.CullDue || !j.Status.IdleSince.Equal(at(0)) || !j.Status.CullAt.Equal(at(time.Hour)) {
		t.Fatalf("suspended, no clock: %+v; want idleSince now, delete in 1h", j.Status)
	}
}

func TestLifetimeDeadlineFollowsThePod(t *testing.T) {
	s := session(1, at(0))
	p := Policy{MaxLifetime: time.Hour}
	j := judge(s, pod("p1", -61*time.Minute), 0, 0, p)
	if !j.LifetimeDue || !j.Status.LifetimeDeadline.Equal(at(-time.Minute)) {
		t.Fatalf("pod 61m old, maxLifetime 1h: %+v; want due since a minute", j.Status)
	}
	j = judge(s, pod("p2", -time.Minute), 0, 0, p)
	if j.LifetimeDue || !j.NextCheck.Equal(t0.Add(59*time.Minute)) {
		t.Fatalf("new pod: %+v; want the clock restarted, next check at its deadline", j)
	}
}

func TestSessionIdleReplacesTemplateIdle(t *testing.T) {
	tpl := &lullv1.SessionTemplate{Spec: lullv1.SessionTemplateSpec{
		Idle:        &lullv1.IdlePolicy{SuspendAfter: &metav1.Duration{Duration: time.Minute}},
		MaxLifetime: &metav1.Duration{Duration: time.Hour},
	}}
	s := &lullv1.Session{}
	if p := PolicyFor(tpl, s); p != (Policy{SuspendAfter: time.Minute, MaxLifetime: time.Hour}) {
		t.Errorf("template policy: %+v", p)
	}
	s.Spec.Idle = &lullv1.IdlePolicy{}
	if p := PolicyFor(tpl, s); p != (Policy{MaxLifetime: time.Hour}) {
		t.Errorf("session idle {}: %+v; want never culled, lifetime kept", p)
	}
}

// A new pod whose runtime has not reported yet does not take over the
// clock: its first report, idle with a lastActivity from before (a turn
// restored from an earlier pod), still starts the clock then.
func TestFirstReportOfANewPodStartsTheClockEvenAfterNoReport(t *testing.T) {
	s := session(0, nil)
	s.Status.Runtime.PodUID = "p1" // the old pod's report
	s.Status.Lifecycle = &lullv1.LifecycleStatus{IdlePodUID: "p1", IdleSince: at(-time.Hour)}
	j := judge(s, pod("p2", -time.Minute), 0, -time.Second, suspend5m)
	if j.State != NoReport || j.Status == nil || j.Status.IdlePodUID != "p1" || j.Status.IdleSince != nil {
		t.Fatalf("new pod, no report yet: %+v %+v; want NoReport, no clock, the judged pod kept", j, j.Status)
	}
	s.Status.Lifecycle = j.Status
	s.Status.Runtime = &lullv1.RuntimeReport{PodUID: "p2", State: lullv1.RuntimeServing, LastActivity: at(-2 * time.Hour), RefreshSeconds: 10}
	j = judge(s, pod("p2", -time.Minute), time.Second, 0, suspend5m)
	if !j.Status.IdleSince.Equal(at(time.Second)) || j.CullDue {
		t.Fatalf("first report of the new pod: %+v; want idleSince now, not the earlier activity", j.Status)
	}
}

// Only real work moves the idle clock. A runtime restarted in its pod (the
// agent's container restarted, its memory gone) reports no lastActivity
// until the next real activity: nothing happened, so the clock holds, as
// it does for an activity that moved back. Restarting it would keep a
// session whose agent restarts more often than suspendAfter from ever
// being culled.
func TestRuntimeRestartThatLosesLastActivityDoesNotRestartTheIdleClock(t *testing.T) {
	s := session(0, nil) // the restarted runtime's first report
	s.Status.Lifecycle = &lullv1.LifecycleStatus{IdlePodUID: "p1", IdleSince: at(-20 * time.Minute), IdleActivity: at(-20 * time.Minute)}
	j := judge(s, pod("p1", -time.Hour), 0, -time.Second, Policy{SuspendAfter: 30 * time.Minute})
	if j.State != Idle || j.Status.IdleSince == nil || !j.Status.IdleSince.Equal(at(-20*time.Minute)) {
		t.Fatalf("same pod, idle since -20m, runtime restarted (no lastActivity): %+v; want the clock held at -20m", j.Status)
	}
	// Held from then on while the report stays so.
	s.Status.Lifecycle = j.Status
	j = judge(s, pod("p1", -time.Hour), 11*time.Minute, 11*time.Minute-time.Second, Policy{SuspendAfter: 30 * time.Minute})
	if !j.CullDue {
		t.Fatalf("31 minutes idle across a runtime restart: %+v; want the cull due", j.Status)
	}
}
