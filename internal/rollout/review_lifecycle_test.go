package rollout

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
	"lull.dev/lull/internal/lifecycle"
)

// lifetimeDrainingFixture: the pod (created two hours ago, maxLifetime
// 1h) has an outstanding Lifetime drain request, issued under its place in
// the wave while it was current; its runtime holds a long turn. Then the
// template changes: the pod is stale.
func lifetimeDrainingFixture() *fixture {
	f := newFixture()
	f.o.Pod.CreationTimestamp = metav1.NewTime(now.Add(-2 * time.Hour))
	f.o.Lifecycle = lifecycle.Policy{MaxLifetime: time.Hour}
	id := drain.RequestID(podUID, lullv1.DrainReasonLifetime, 1)
	outstanding(&f.o, &lullv1.DrainRequest{RequestID: id, PodUID: podUID, Reason: lullv1.DrainReasonLifetime, Sequence: 1, RequestedAt: metav1.NewTime(now.Add(-time.Hour))})
	r := report(podUID, id, lullv1.RuntimeDraining, 1)
	r.RefreshSeconds = 10
	f.o.Session.Status.Runtime = r
	f.o.ReportWrittenAt = now.Add(-time.Second)
	return f
}

// Guarantee 6 (a stale pod under Drain or Replace is moved by the update,
// the lifetime restart only under Passive) and the update policy: a stale
// pod whose Lifetime drain (no deadline) is outstanding must still get the
// update's deadline under Replace, a drainTimeout with onDrainTimeout
// Replace, or a break-glass. Otherwise one long turn, or one hung runtime,
// holds a security fix off that session forever, and its place in the wave
// with it.
func TestLifetimeDrainDoesNotShieldAStalePodFromTheUpdatePolicy(t *testing.T) {
	for name, policy := range map[string]lullv1.UpdatePolicy{
		"Replace":                  {Strategy: lullv1.UpdateStrategyReplace},
		"drainTimeout 5m, Replace": {Strategy: lullv1.UpdateStrategyDrain, DrainTimeout: &metav1.Duration{Duration: 5 * time.Minute}, OnDrainTimeout: lullv1.DrainTimeoutReplace},
	} {
		t.Run(name, func(t *testing.T) {
			f := lifetimeDrainingFixture()
			f.o.Policy = policy
			f.o.Admitted = Admitted([]lullv1.WaveEntry{{Session: "s", Sequence: 1}}, f.o.Session)
			a := Decide(f.o)
			if a.Drain == nil || a.Drain.Reason != lullv1.DrainReasonUpdate || a.Drain.Deadline == nil {
				t.Fatalf("stale pod with a Lifetime drain outstanding under %s: %s/%s drain %+v; want the update's request, with its deadline", name, a.Kind, a.Reason, a.Drain)
			}
			// Written back; once the deadline passes, the pod is replaced.
			outstanding(&f.o, a.Drain)
			f.o.Admitted = Admitted([]lullv1.WaveEntry{{Session: "s", Sequence: 1}}, f.o.Session)
			f.o.Now = a.Drain.Deadline.Time.Add(time.Second)
			if a := Decide(f.o); a.Kind != DeletePod {
				t.Fatalf("past the update's deadline: %s/%s; want the pod replaced", a.Kind, a.Reason)
			}
		})
	}
	// Under Passive the lifetime restart is how it converges: it goes on.
	f := lifetimeDrainingFixture()
	f.o.Policy = lullv1.UpdatePolicy{Strategy: lullv1.UpdateStrategyPassive}
	if a := Decide(f.o); a.Kind != Wait || a.Reason != ReasonLifetime || a.Drain == nil || a.Drain.Reason != lullv1.DrainReasonLifetime {
		t.Fatalf("Passive: %s/%s %+v; want the lifetime drain kept", a.Kind, a.Reason, a.Drain)
	}
	// A current pod keeps its lifetime drain.
	f = lifetimeDrainingFixture()
	f.o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = newRev
	if a := Decide(f.o); a.Kind != Wait || a.Reason != ReasonLifetime || a.Drain == nil {
		t.Fatalf("current pod: %s/%s; want the lifetime drain kept", a.Kind, a.Reason)
	}
}
