package rollout

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Guarantee 3 of issue 21: evidence that a runtime started, once seen, is
// recorded at once on every path that writes nothing for a while, and
// cannot be erased by a later write to status.runtime.
//
// The scenario: the kubelet lost alice's runtime container (containerd's
// state was reset, the node rebooted): it shows the container as it does
// one "that could not be located", lastState.terminated with reason
// ContainerStatusUnknown and exit code 137 but no finishedAt, the restart
// count raised, and the container waiting in a back-off (the image must be
// pulled again, ImagePullBackOff). It has just started the container
// anew; the runtime has published its Serving report naming the pod and
// accepted a turn, and the kubelet has not yet published Running. The
// pod is stale and not yet admitted to the wave, a passing state
// (WaitingForWave) whose status write waits SettleDelay. The controller
// has no record of the pod's start (its runtime had not reported before
// its container was lost).
//
// PodFailure rests on the report alone: with no termination shown, a
// report naming the pod cannot be ordered and keeps the pod. But
// RecordStart asks for no write: kubeletShowsStart is true (a restart and
// a terminated lastState are shown) and unrecordedRestart needs a
// termination with a finishedAt. A write to status.runtime within the
// settle delay (a stale writer's, an admin's) erases the only evidence:
// the pod is then failed and committed PodFailed, deleted under its
// runtime's turn. The record of the start would have kept it
// (reportedSinceTermination: a record with no termination shown).
func TestAReportThatAloneKeepsAPodWhoseLastTerminationHasNoTimeIsRecordedAtOnce(t *testing.T) {
	f := newFixture()
	f.o.Admitted = false
	c := waiting("ImagePullBackOff")
	c.RestartCount = 1
	c.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{Reason: "ContainerStatusUnknown", ExitCode: 137,
		Message: "The container could not be located when the pod was deleted.  The container used to be Running"}
	f.o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{c}
	f.o.Pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	f.o.Session.Status.Runtime = report(podUID, "", lullv1.RuntimeServing, 1)

	if failed, why := PodFailure(f.o.Pod, f.o.Session.Status, f.o.ReportWrittenAt); failed {
		t.Fatalf("setup: PodFailure = true (%s) with the live runtime's report", why)
	}
	a := decide(f.o)
	if a.Kind != Wait || !Passing(f.o, a) {
		t.Fatalf("setup: Decide = %s %s, want a passing Wait (the status write settles)", a.Kind, a.Reason)
	}

	if !RecordStart(f.o) {
		// What the settle lets happen: the report is overwritten.
		erased := *f.o.Session
		erased.Status.Runtime = report("pod-0", "", lullv1.RuntimeServing, 0)
		f.o.Session = &erased
		after := decide(f.o)
		t.Errorf("RecordStart = false for a report that alone keeps pod %s from being failed (no termination time shown); "+
			"once status.runtime is overwritten within the settle delay, Decide = %s %s (%s)", podUID, after.Kind, after.Reason, after.Message)
	}
}
