package runtime

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// A healthy runtime keeps its report fresh: a stale report makes the
// controller say RuntimeNotReporting (a Warning Event) and never cull. The
// runtime of a new pod starts while its Session still names the pod it
// replaced (the controller writes the new pod into status only once it has
// seen it, later if the controller is down or behind). That runtime was
// never replaced: it must heartbeat. Only a runtime the session moved away
// from (it named this pod, and now names another) stops refreshing.
func TestNewPodHeartbeatsBeforeTheSessionNamesIt(t *testing.T) {
	f := newFakeSession()
	// The session still names the previous pod, whose last report stands.
	f.session.Status.PodUID = otherPod
	prev := metav1.NewTime(time.Now().Add(-time.Minute))
	f.session.Status.Runtime = &lullv1.RuntimeReport{PodUID: otherPod, State: lullv1.RuntimeDrained, RequestID: req1, RefreshSeconds: 60, ReportedAt: &prev}
	rt := heartbeatRuntime(f)
	runRuntime(t, rt)
	waitHeartbeats(t, f, "the new pod's Serving report, refreshed", isState(lullv1.RuntimeServing, ""), 3)
}
