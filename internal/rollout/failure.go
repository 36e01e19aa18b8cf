package rollout

import (
	"fmt"
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

// PodFailure reports whether a pod is terminal (phase Failed or Succeeded)
// or has a container that cannot start, and says why.
func PodFailure(pod *corev1.Pod) (bool, string) {
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return true, "phase " + string(pod.Status.Phase)
	}
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, c := range list {
			if w := c.State.Waiting; w != nil && unstartable[w.Reason] {
				return true, fmt.Sprintf("container %s: %s", c.Name, w.Reason)
			}
		}
	}
	return false, ""
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
