package rollout

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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
			a := decide(f.o)
			if a.Drain == nil || a.Drain.Reason != lullv1.DrainReasonUpdate || a.Drain.Deadline == nil {
				t.Fatalf("stale pod with a Lifetime drain outstanding under %s: %s/%s drain %+v; want the update's request, with its deadline", name, a.Kind, a.Reason, a.Drain)
			}
			// Written back; once the deadline passes, the pod is replaced.
			outstanding(&f.o, a.Drain)
			f.o.Admitted = Admitted([]lullv1.WaveEntry{{Session: "s", Sequence: 1}}, f.o.Session)
			f.o.Now = a.Drain.Deadline.Time.Add(time.Second)
			if a := decide(f.o); a.Kind != Commit || a.Replacement == nil {
				t.Fatalf("past the update's deadline: %s/%s; want the pod's replacement committed", a.Kind, a.Reason)
			}
		})
	}
	// Under Passive the lifetime restart is how it converges: it goes on.
	f := lifetimeDrainingFixture()
	f.o.Policy = lullv1.UpdatePolicy{Strategy: lullv1.UpdateStrategyPassive}
	if a := decide(f.o); a.Kind != Wait || a.Reason != lullv1.ReasonLifetime || a.Drain == nil || a.Drain.Reason != lullv1.DrainReasonLifetime {
		t.Fatalf("Passive: %s/%s %+v; want the lifetime drain kept", a.Kind, a.Reason, a.Drain)
	}
	// A current pod keeps its lifetime drain.
	f = lifetimeDrainingFixture()
	f.o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = newRev
	if a := decide(f.o); a.Kind != Wait || a.Reason != lullv1.ReasonLifetime || a.Drain == nil {
		t.Fatalf("current pod: %s/%s; want the lifetime drain kept", a.Kind, a.Reason)
	}
}

// Guarantee 6 through the ledger: a fleet created at once, all past
// maxLifetime, restarts within maxUnavailable and without starving: the
// template controller plans the wave (PlanWave), each session controller
// decides (Decide, NextStatus) on what it sees; runtimes answer a drain at
// the next step; a committed pod is replaced by a new one at once.
func TestLifetimeRestartsStayWithinTheWaveAndAllFinish(t *testing.T) {
	const n, maxUnavailable = 6, 2
	type member struct {
		s   *lullv1.Session
		pod int
	}
	podOf := func(name string, i int, created time.Time) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name + "-0", UID: types.UID(fmt.Sprintf("%s-pod-%d", name, i)), CreationTimestamp: metav1.NewTime(created),
			Labels: map[string]string{appsv1.ControllerRevisionHashLabelKey: newRev}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
				ContainerStatuses: []corev1.ContainerStatus{running(lullv1.RuntimeContainerName)}}}
	}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: appsv1.StatefulSetStatus{ObservedGeneration: 1, UpdateRevision: newRev}}
	var fleet []*member
	pods := map[string]*corev1.Pod{}
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		s := &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
		pods[name] = podOf(name, 0, now.Add(-2*time.Hour))
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pods[name].UID, State: lullv1.RuntimeServing, ActiveTurns: 1, RefreshSeconds: 10}
		fleet = append(fleet, &member{s: s})
	}
	policy := lifecycle.Policy{MaxLifetime: time.Hour}
	var wave []lullv1.WaveEntry
	restarted := map[string]bool{}
	peak := 0
	t1 := now
	for step := range 200 {
		t1 = t1.Add(time.Second)
		var all []lullv1.Session
		for _, m := range fleet {
			all = append(all, *m.s.DeepCopy())
		}
		wave = PlanWave(wave, all, maxUnavailable, t1, "")
		moving := 0
		for _, m := range fleet {
			s := m.s
			pod := pods[s.Name]
			o := Observed{Now: t1, Session: s.DeepCopy(), Policy: lullv1.UpdatePolicy{Strategy: lullv1.UpdateStrategyPassive}, StatefulSet: sts, Pod: pod,
				Admitted: Admitted(wave, s), Lifecycle: policy, ReportWrittenAt: t1.Add(-time.Second)}
			a := decide(o)
			runtime := s.Status.Runtime
			s.Status = nextStatus(o, a)
			s.Status.Runtime = runtime
			switch a.Kind {
			case RequestDrain:
				// The runtime's turn ends; it drains at once.
				s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, RequestID: a.Drain.RequestID, State: lullv1.RuntimeDrained, RefreshSeconds: 10}
			case Commit, DeletePod:
				m.pod++
				pods[s.Name] = podOf(s.Name, m.pod, t1)
				s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pods[s.Name].UID, State: lullv1.RuntimeServing, ActiveTurns: 1, RefreshSeconds: 10}
				restarted[s.Name] = true
			}
			if s.Status.Drain != nil || s.Status.Replacement != nil {
				moving++
			}
		}
		if moving > maxUnavailable {
			t.Fatalf("step %d: %d sessions restarting for their lifetime at once, maxUnavailable %d (wave %v)", step, moving, maxUnavailable, waveNames(wave))
		}
		peak = max(peak, moving)
		if len(restarted) == n {
			if peak != maxUnavailable {
				t.Errorf("at most %d restarting at once; want the wave used up to maxUnavailable %d", peak, maxUnavailable)
			}
			return
		}
	}
	t.Fatalf("after 200 steps only %d of %d sessions restarted for their lifetime: %v (wave %v)", len(restarted), n, restarted, waveNames(wave))
}
