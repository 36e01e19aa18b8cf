package rollout

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Guarantee 1 of issue 21 (and PodFailure's sidecar rule): a pod whose
// drain sidecar may be live and speaking for it is drained, not replaced
// without a drain; a report that may be live is never taken for a dead
// one.
//
// The scenario: containerd lost alice's drain sidecar (its state was
// reset): the kubelet shows it as a container "that could not be
// located", lastState.terminated with reason ContainerStatusUnknown and
// exit code 137 but no finishedAt, and waiting while it creates it anew
// (no back-off follows a lost container). In the same second the runtime
// container crashed into CrashLoopBackOff. The kubelet's sync publishes
// the status it computed before it started the sidecar again (it
// generates the pod's status from its cache, then starts containers), so
// the sidecar is shown waiting; meanwhile the restarted sidecar has read
// its state file, holds the turn begun through it before the loss, and
// has written its report naming the pod, in that same second. The
// controller recorded the pod's start from the sidecar's first report,
// long before.
//
// With a termination time shown, SidecarHolds orders the sidecar's report
// after it and the pod is drained (the control below). With none shown,
// SidecarHolds gives up (lastTermination: not terminated → false),
// unlike unrecordedRestart and reportedSinceTermination, which take a
// report that cannot be ordered against a termination as live. The
// fallback does not catch it either: reportedSinceTermination orders the
// sidecar's report against the runtime container's crash, in the same
// second. The pod is committed PodFailed and deleted under the turn the
// restarted sidecar holds.
func TestAPodBehindASidecarTheKubeletLostIsDrainedWhileItsReportMayBeLive(t *testing.T) {
	crashed := now.Add(-20 * time.Second).Truncate(time.Second).Add(300 * time.Millisecond)
	written := crashed.Truncate(time.Second).Add(700 * time.Millisecond)
	setup := func(sidecar corev1.ContainerStatus) Observed {
		f := newFixture()
		f.o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{crashLooping(crashed)}
		f.o.Pod.Status.InitContainerStatuses = []corev1.ContainerStatus{sidecar}
		f.o.Session.Status.Runtime = report(podUID, "", lullv1.RuntimeServing, 1)
		f.o.Session.Status.StartedPodUID = podUID
		f.o.Session.Status.StartedReportTime = &metav1.Time{Time: now.Add(-time.Hour)}
		f.o.ReportWrittenAt = written
		return f.o
	}

	// Control: the sidecar's termination shown 15 s before the crash (a
	// back-off had passed): its report is ordered after it, and the pod
	// is drained.
	known := setup(sidecarBackingOff(crashed.Add(-15 * time.Second)))
	if a := decide(known); a.Kind != RequestDrain {
		t.Fatalf("setup: with the sidecar's termination time shown, Decide = %s %s, want RequestDrain", a.Kind, a.Reason)
	}

	lost := waitingIn(lullv1.AgentContainerName, "ContainerCreating")
	lost.RestartCount = 1
	lost.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{Reason: "ContainerStatusUnknown", ExitCode: 137,
		Message: "The container could not be located when the pod was deleted.  The container used to be Running"}
	o := setup(lost)
	if !SidecarHolds(o.Pod, o.Session.Status, o.ReportWrittenAt) {
		t.Errorf("SidecarHolds = false for a sidecar whose last termination shows no time and whose report naming the pod cannot be ordered against it")
	}
	if a := decide(o); a.Kind != RequestDrain {
		t.Errorf("Decide = %s %s (%s), want RequestDrain: the sidecar's report may be its restarted run's, holding a turn", a.Kind, a.Reason, a.Message)
	}
}
