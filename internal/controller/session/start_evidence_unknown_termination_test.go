package session

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// lostContainer: the kubelet lost the runtime container (containerd's
// state reset, a node reboot) and shows it as one "that could not be
// located": lastState.terminated ContainerStatusUnknown, exit code 137,
// no finishedAt, the restart count raised; its start anew is held in a
// back-off (the image must be pulled again).
func lostContainer(pod *corev1.Pod) {
	pod.Status.ContainerStatuses[0] = corev1.ContainerStatus{Name: lullv1.RuntimeContainerName, RestartCount: 1,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "ContainerStatusUnknown", ExitCode: 137,
			Message: "The container could not be located when the pod was deleted.  The container used to be Running"}}}
}

// Guarantee 3 of issue 21 through the reconciler: the kubelet has just
// started alice's lost runtime container anew and not yet published
// Running (lostContainer); the runtime's Serving report names the pod and
// holds a turn, and no record of the pod's start exists. With no
// termination time shown, that report alone keeps the pod from being
// failed, yet the stale session, not admitted to the wave, waits
// SettleDelay before writing (WaitingForWave) and records nothing. An
// admin's write of status.runtime within that delay erases the evidence,
// and the next reconcile commits the pod PodFailed and deletes it under
// its runtime's turn.
func TestAStartSeenBehindALostContainerIsRecordedBeforeTheSettle(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, func(s *lullv1.Session, pod *corev1.Pod) {
		lostContainer(pod)
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, State: lullv1.RuntimeServing, ActiveTurns: 1}
	})
	notAdmitted(t, w)
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	recorded := w.session().Status.StartedPodUID
	overwriteReport(t, w, &lullv1.RuntimeReport{PodUID: "pod-0", State: lullv1.RuntimeServing})
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if recorded != w.podUID || !w.podExists() {
		t.Errorf("status.startedPodUID = %q after the reconcile that saw the report (want %q); after status.runtime was overwritten, pod deleted = %v (%d deletes)",
			recorded, w.podUID, !w.podExists(), len(w.deletes))
	}
}
