package rollout

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// sidecarRunning is the injected drain sidecar as the kubelet shows it
// running.
func sidecarRunning() corev1.ContainerStatus {
	return running(lullv1.AgentContainerName)
}

// sidecarBackingOff is the drain sidecar in CrashLoopBackOff, its last run
// ended at finished.
func sidecarBackingOff(finished time.Time) corev1.ContainerStatus {
	c := waitingIn(lullv1.AgentContainerName, "CrashLoopBackOff")
	c.RestartCount = 2
	c.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, FinishedAt: metav1.NewTime(finished)}
	return c
}

// A stale pod whose runtime container cannot start while its drain sidecar
// (spec.agent) is live and has reported from the pod: the sidecar holds
// the turns begun through it and answers a drain, so the pod is drained,
// not replaced without one, however old the sidecar's report (it writes a
// turn count only at its refresh). Being failed, it is drained at once:
// without a wave place, under Passive too, and without the backoff of
// failed replacements. A terminal pod, a sidecar not running and not
// restarted since its report, or a sidecar that never reported leaves the
// pod to the rules of a runtime that reports itself.
func TestSidecarHoldsTheTurnsOfAFailedPod(t *testing.T) {
	finished := now.Add(-20 * time.Second)
	behindSidecar := func(o *Observed, runtime corev1.ContainerStatus, sidecar corev1.ContainerStatus, turns int32, written time.Time) {
		o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{runtime}
		o.Pod.Status.InitContainerStatuses = []corev1.ContainerStatus{sidecar}
		o.Session.Status.Runtime = report(podUID, "", lullv1.RuntimeServing, turns)
		o.ReportWrittenAt = written
	}
	stale := finished.Add(-30 * time.Second) // the sidecar's last refresh, before the crash
	drainReq := func() *lullv1.DrainRequest { return requested(podUID, newRev, 1, now) }
	failed := committed(podUID, lullv1.ReplacementPodFailed, "")
	runDecideTable(t, []decideCase{
		{name: "crash loop, sidecar running, its report from before the crash, a turn held: drained",
			edit: func(o *Observed) {
				behindSidecar(o, crashLooping(finished), sidecarRunning(), 1, stale)
			}, kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: drainReq},
		{name: "crash loop behind the sidecar, no wave place: drained at once",
			edit: func(o *Observed) {
				o.Admitted = false
				behindSidecar(o, crashLooping(finished), sidecarRunning(), 1, stale)
			}, kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: drainReq},
		{name: "crash loop behind the sidecar, strategy Passive: drained at once",
			edit: func(o *Observed) {
				o.Policy.Strategy = lullv1.UpdateStrategyPassive
				behindSidecar(o, crashLooping(finished), sidecarRunning(), 1, stale)
			}, kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: drainReq},
		{name: "crash loop behind the sidecar after failed replacements: drained, no backoff",
			edit: func(o *Observed) {
				o.Session.Status.FailedReplacements = 3
				o.Session.Status.LastFailedReplacementTime = &metav1.Time{Time: now.Add(-time.Second)}
				behindSidecar(o, crashLooping(finished), sidecarRunning(), 1, stale)
			}, kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: drainReq},
		{name: "crash loop behind the sidecar, the turn still held: waits for the drain",
			edit: func(o *Observed) {
				o.Admitted = false
				behindSidecar(o, crashLooping(finished), sidecarRunning(), 1, stale)
				outstanding(o, requested(podUID, newRev, 1, now))
			}, kind: Wait, why: lullv1.ReasonDraining, drain: drainReq},
		{name: "crash loop behind the sidecar, the sidecar answered Drained: committed as drained",
			edit: func(o *Observed) {
				o.Admitted = false
				behindSidecar(o, crashLooping(finished), sidecarRunning(), 0, now)
				outstanding(o, requested(podUID, newRev, 1, now))
				o.Session.Status.Runtime = report(podUID, o.Session.Status.Drain.RequestID, lullv1.RuntimeDrained, 0)
			}, kind: Commit, why: lullv1.ReasonDrained, drain: drainReq,
			commit: committed(podUID, lullv1.ReplacementDrained, requested(podUID, newRev, 1, now).RequestID)},
		{name: "runtime image never pulled, the sidecar reported: drained at once, without a wave place",
			edit: func(o *Observed) {
				o.Admitted = false
				behindSidecar(o, waiting("ImagePullBackOff"), sidecarRunning(), 0, now.Add(-time.Minute))
			}, kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: drainReq},
		{name: "suspended, crash loop behind the sidecar: a Manual drain first",
			edit: func(o *Observed) {
				o.Session.Spec.Suspend = true
				behindSidecar(o, crashLooping(finished), sidecarRunning(), 1, stale)
			}, kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: func() *lullv1.DrainRequest { return manual(podUID, 1, now) }},
		{name: "the kubelet shows the sidecar backing off, its report written since it restarted: drained",
			edit: func(o *Observed) {
				behindSidecar(o, crashLooping(finished), sidecarBackingOff(finished.Add(5*time.Second)), 1, finished.Add(8*time.Second))
			}, kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: drainReq},
		{name: "the sidecar backing off, its report from before its own termination: failed",
			edit: func(o *Observed) {
				behindSidecar(o, crashLooping(finished), sidecarBackingOff(finished.Add(5*time.Second)), 1, stale)
			}, kind: Commit, why: lullv1.ReasonPodFailed, commit: failed},
		{name: "the sidecar running but no report names the pod: it has accepted no turn, failed",
			edit: func(o *Observed) {
				behindSidecar(o, crashLooping(finished), sidecarRunning(), 1, stale)
				o.Session.Status.Runtime.PodUID = "pod-0"
			}, kind: Commit, why: lullv1.ReasonPodFailed, commit: failed},
		{name: "a terminal pod is failed, whatever its sidecar's status says",
			edit: func(o *Observed) {
				behindSidecar(o, crashLooping(finished), sidecarRunning(), 1, stale)
				o.Pod.Status.Phase = corev1.PodFailed
			}, kind: Commit, why: lullv1.ReasonPodFailed, commit: failed},
		{name: "a current pod crash-looping behind the sidecar is never replaced",
			edit: func(o *Observed) {
				o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = newRev
				behindSidecar(o, crashLooping(finished), sidecarRunning(), 1, stale)
			}, kind: Wait, why: lullv1.ReasonUpToDate},
	})
}

// A pod failing behind its sidecar is failed in its status (Ready reason
// PodFailed, which the rollout brake counts at once), although it is
// drained, and the judgement does not move with the sidecar's refresh: a
// report written after the runtime container's termination says nothing of
// the runtime container when the sidecar wrote it.
func TestAPodFailingBehindItsSidecarShowsFailed(t *testing.T) {
	finished := now.Add(-20 * time.Second)
	for _, written := range []time.Time{finished.Add(-30 * time.Second), finished.Add(10 * time.Second)} {
		f := newFixture()
		f.o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = newRev
		f.o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{crashLooping(finished)}
		f.o.Pod.Status.InitContainerStatuses = []corev1.ContainerStatus{sidecarRunning()}
		f.o.Session.Status.Runtime = report(podUID, "", lullv1.RuntimeServing, 0)
		f.o.ReportWrittenAt = written
		st := nextStatus(f.o, decide(f.o))
		if c := meta.FindStatusCondition(st.Conditions, lullv1.ConditionReady); c == nil || c.Reason != lullv1.ReasonPodFailed {
			t.Errorf("report written at %s: Ready = %+v, want reason %s", written, c, lullv1.ReasonPodFailed)
		}
	}
}
