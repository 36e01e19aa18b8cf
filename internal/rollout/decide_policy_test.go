package rollout

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// TestDecidePolicies covers the update policy: waves, Passive, Replace and
// drain deadlines.
func TestDecidePolicies(t *testing.T) {
	earlier := now.Add(-time.Minute)
	runDecideTable(t, []decideCase{
		// Waves.
		{name: "a stale session without a place in the wave waits",
			edit: func(o *Observed) { o.Admitted = false }, kind: Wait, why: lullv1.ReasonWaitingForWave},
		{name: "a session without a place keeps the request it drains under",
			edit: func(o *Observed) {
				o.Admitted = false
				outstanding(o, requested(podUID, newRev, 1, earlier))
			}, kind: Wait, why: lullv1.ReasonDraining, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, 1, earlier) }},
		{name: "a session without a place still answers a Drained report",
			edit: func(o *Observed) {
				o.Admitted = false
				d := requested(podUID, newRev, 1, earlier)
				outstanding(o, d)
				o.Session.Status.Runtime = report(podUID, d.RequestID, lullv1.RuntimeDrained, 0)
			}, kind: Commit, why: lullv1.ReasonDrained, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, 1, earlier) },
			commit: committed(podUID, lullv1.ReplacementDrained, requested(podUID, newRev, 1, earlier).RequestID)},
		{name: "a failed stale pod is replaced without a place",
			edit: func(o *Observed) {
				o.Admitted = false
				o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("CrashLoopBackOff")}
			}, kind: Commit, why: string(lullv1.ReplacementPodFailed),
			commit: &lullv1.Replacement{PodUID: podUID, Reason: lullv1.ReplacementPodFailed, CommittedAt: metav1.NewTime(now)}},

		// Update policies.
		{name: "Passive leaves a busy stale pod alone",
			edit: func(o *Observed) {
				o.Policy.Strategy = lullv1.UpdateStrategyPassive
				o.Session.Status.Runtime = report(podUID, "", lullv1.RuntimeServing, 2)
			}, kind: Wait, why: lullv1.ReasonUpdatePending},
		{name: "Passive withdraws an Update request left by another strategy",
			edit: func(o *Observed) {
				o.Policy.Strategy = lullv1.UpdateStrategyPassive
				outstanding(o, requested(podUID, newRev, 1, earlier))
			}, kind: Wait, why: lullv1.ReasonUpdatePending},
		{name: "Passive still finishes a committed replacement",
			edit: func(o *Observed) {
				o.Policy.Strategy = lullv1.UpdateStrategyPassive
				d := requested(podUID, newRev, 1, earlier)
				outstanding(o, d)
				o.Session.Status.Replacement = committed(podUID, lullv1.ReplacementDrained, d.RequestID)
			}, kind: DeletePod, why: string(lullv1.ReplacementDrained),
			drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, 1, earlier) }, commit: committed(podUID, lullv1.ReplacementDrained, requested(podUID, newRev, 1, earlier).RequestID)},
		{name: "Passive still replaces a failed stale pod",
			edit: func(o *Observed) {
				o.Policy.Strategy = lullv1.UpdateStrategyPassive
				o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("CrashLoopBackOff")}
			}, kind: Commit, why: string(lullv1.ReplacementPodFailed),
			commit: &lullv1.Replacement{PodUID: podUID, Reason: lullv1.ReplacementPodFailed, CommittedAt: metav1.NewTime(now)}},
		{name: "Replace requests a drain whose deadline is now",
			edit: func(o *Observed) { o.Policy.Strategy = lullv1.UpdateStrategyReplace },
			kind: RequestDrain, why: lullv1.ReasonDrainRequested, after: time.Second / 10,
			drain: func() *lullv1.DrainRequest { return withDeadline(requested(podUID, newRev, 1, now), now) }},
		{name: "Replace then deletes the pod, turns or not",
			edit: func(o *Observed) {
				o.Policy.Strategy = lullv1.UpdateStrategyReplace
				outstanding(o, withDeadline(requested(podUID, newRev, 1, now), now))
				o.Session.Status.Runtime = report(podUID, requested(podUID, newRev, 1, now).RequestID, lullv1.RuntimeDraining, 3)
			}, kind: Commit, why: lullv1.ReasonReplaced,
			drain:  func() *lullv1.DrainRequest { return withDeadline(requested(podUID, newRev, 1, now), now) },
			commit: committed(podUID, lullv1.ReplacementReplaced, requested(podUID, newRev, 1, now).RequestID)},
		{name: "Replace takes a Drained answer as drained",
			edit: func(o *Observed) {
				o.Policy.Strategy = lullv1.UpdateStrategyReplace
				d := withDeadline(requested(podUID, newRev, 1, now), now)
				outstanding(o, d)
				o.Session.Status.Runtime = report(podUID, d.RequestID, lullv1.RuntimeDrained, 0)
			}, kind: Commit, why: lullv1.ReasonDrained,
			drain:  func() *lullv1.DrainRequest { return withDeadline(requested(podUID, newRev, 1, now), now) },
			commit: committed(podUID, lullv1.ReplacementDrained, requested(podUID, newRev, 1, now).RequestID)},
		{name: "drainTimeout puts the deadline in the request",
			edit: func(o *Observed) { o.Policy.DrainTimeout = &metav1.Duration{Duration: 5 * time.Minute} },
			kind: RequestDrain, why: lullv1.ReasonDrainRequested, after: 5*time.Minute + time.Second/10,
			drain: func() *lullv1.DrainRequest {
				return withDeadline(requested(podUID, newRev, 1, now), now.Add(5*time.Minute))
			}},
		{name: "before the deadline the drain is waited for, and looked at again at the deadline",
			edit: func(o *Observed) {
				o.Policy = lullv1.UpdatePolicy{DrainTimeout: &metav1.Duration{Duration: 5 * time.Minute}, OnDrainTimeout: lullv1.DrainTimeoutReplace}
				outstanding(o, withDeadline(requested(podUID, newRev, 1, earlier), earlier.Add(5*time.Minute)))
			}, kind: Wait, why: lullv1.ReasonDraining, after: 4*time.Minute + time.Second/10,
			drain: func() *lullv1.DrainRequest {
				return withDeadline(requested(podUID, newRev, 1, earlier), earlier.Add(5*time.Minute))
			}},
		{name: "deadline passed with onDrainTimeout Replace deletes the pod",
			edit: func(o *Observed) {
				o.Policy = lullv1.UpdatePolicy{DrainTimeout: &metav1.Duration{Duration: 30 * time.Second}, OnDrainTimeout: lullv1.DrainTimeoutReplace}
				outstanding(o, withDeadline(requested(podUID, newRev, 1, earlier), earlier.Add(30*time.Second)))
			}, kind: Commit, why: lullv1.ReasonDrainDeadlineExceeded,
			drain: func() *lullv1.DrainRequest {
				return withDeadline(requested(podUID, newRev, 1, earlier), earlier.Add(30*time.Second))
			}, commit: committed(podUID, lullv1.ReplacementDrainDeadlineExceeded, requested(podUID, newRev, 1, earlier).RequestID)},
		{name: "deadline passed with onDrainTimeout Wait waits, overdue",
			edit: func(o *Observed) {
				o.Policy = lullv1.UpdatePolicy{DrainTimeout: &metav1.Duration{Duration: 30 * time.Second}, OnDrainTimeout: lullv1.DrainTimeoutWait}
				outstanding(o, withDeadline(requested(podUID, newRev, 1, earlier), earlier.Add(30*time.Second)))
			}, kind: Wait, why: lullv1.ReasonDrainOverdue,
			drain: func() *lullv1.DrainRequest {
				return withDeadline(requested(podUID, newRev, 1, earlier), earlier.Add(30*time.Second))
			}},
		{name: "a deadline set after the request (break-glass) is added to it, counted from now",
			edit: func(o *Observed) {
				o.Policy = lullv1.UpdatePolicy{DrainTimeout: &metav1.Duration{Duration: 5 * time.Minute}, OnDrainTimeout: lullv1.DrainTimeoutReplace}
				outstanding(o, requested(podUID, newRev, 1, earlier))
			}, kind: Wait, why: lullv1.ReasonDraining, after: 5*time.Minute + time.Second/10,
			drain: func() *lullv1.DrainRequest {
				return withDeadline(requested(podUID, newRev, 1, earlier), now.Add(5*time.Minute))
			}},
		{name: "a request's deadline outlives a policy change",
			edit: func(o *Observed) {
				o.Policy = lullv1.UpdatePolicy{OnDrainTimeout: lullv1.DrainTimeoutReplace}
				outstanding(o, withDeadline(requested(podUID, newRev, 1, earlier), earlier.Add(30*time.Second)))
			}, kind: Commit, why: lullv1.ReasonDrainDeadlineExceeded,
			drain: func() *lullv1.DrainRequest {
				return withDeadline(requested(podUID, newRev, 1, earlier), earlier.Add(30*time.Second))
			}, commit: committed(podUID, lullv1.ReplacementDrainDeadlineExceeded, requested(podUID, newRev, 1, earlier).RequestID)},
	})
}
