package rollout

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// unstartable lists the container waiting reasons that mean the container
// cannot start without a new pod: the kubelet's image, config and crash-loop
// back-offs.
var unstartable = map[string]bool{
	"CrashLoopBackOff":           true,
	"ImagePullBackOff":           true,
	"ErrImagePull":               true,
	"ErrImageNeverPull":          true,
	"InvalidImageName":           true,
	"CreateContainerConfigError": true,
	"CreateContainerError":       true,
	"RunContainerError":          true,
}

// PodFailure reports whether a pod holds no runtime that could be serving a
// turn because it is terminal (phase Failed or Succeeded) or its runtime
// container cannot start, and says why.
//
// Only the pod phase and the runtime container (lullv1.RuntimeContainerName)
// count. A crash-looping mesh proxy or a native sidecar in ImagePullBackOff
// next to a running runtime does not make the pod failed: that runtime may
// hold turns, and is drained like any other.
func PodFailure(pod *corev1.Pod) (bool, string) {
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return true, "phase " + string(pod.Status.Phase)
	}
	c := runtimeStatus(pod)
	if c == nil {
		return false, ""
	}
	if w := c.State.Waiting; w != nil && unstartable[w.Reason] {
		return true, fmt.Sprintf("container %s: %s", c.Name, w.Reason)
	}
	return false, ""
}

// NeverStarted reports whether the pod's runtime has never run: the pod is
// not terminal, its runtime container has no running or terminated state,
// now or before (restart count 0), and no runtime report names the pod.
// Such a pod (Pending, unschedulable, pulling its image, held by a failing
// init container) cannot have accepted a turn, so it needs no drain: there
// is no runtime to answer one. report is the session's status.runtime.
//
// The report check covers a kubelet that has started the container but not
// yet published its status: a runtime accepts turns only after it has
// published a Serving report naming its pod.
func NeverStarted(pod *corev1.Pod, report *lullv1.RuntimeReport) (bool, string) {
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return false, ""
	}
	if report != nil && report.PodUID == pod.UID {
		return false, ""
	}
	c := runtimeStatus(pod)
	if c == nil {
		return true, fmt.Sprintf("runtime container has not started (pod %s)", describePending(pod))
	}
	if c.RestartCount > 0 || c.State.Running != nil || c.State.Terminated != nil ||
		c.LastTerminationState.Running != nil || c.LastTerminationState.Terminated != nil {
		return false, ""
	}
	why := "waiting"
	if w := c.State.Waiting; w != nil && w.Reason != "" {
		why = w.Reason
	}
	return true, fmt.Sprintf("runtime container has never started (%s)", why)
}

// describePending says why a pod without a runtime container status is
// pending: its PodScheduled condition when unscheduled, else its phase.
func describePending(pod *corev1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
			msg := strings.TrimSpace(c.Reason + ": " + c.Message)
			return "unscheduled, " + strings.TrimSuffix(msg, ":")
		}
	}
	if pod.Status.Phase == "" {
		return "no status yet"
	}
	return string(pod.Status.Phase)
}

// runtimeStatus returns the status of the pod's runtime container, or nil.
func runtimeStatus(pod *corev1.Pod) *corev1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == lullv1.RuntimeContainerName {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// Backoff bounds how often failed stale pods are replaced: none before the
// first failed replacement, then 5 s doubling per failed replacement, capped
// at 5 minutes. The count resets once the session runs a ready current pod.
func Backoff(failedReplacements int32) time.Duration {
	const base, limit = 5 * time.Second, 5 * time.Minute
	if failedReplacements <= 0 {
		return 0
	}
	d := base
	for i := int32(1); i < failedReplacements && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

func backoffRemaining(st lullv1.SessionStatus, now time.Time) time.Duration {
	if st.LastFailedReplacementTime == nil {
		return 0
	}
	return st.LastFailedReplacementTime.Add(Backoff(st.FailedReplacements)).Sub(now)
}
