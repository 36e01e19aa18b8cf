package rollout

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Guarantee 7 of issue 21: a session's condition names a
// refusal only while the cause is there; an old Event from before the
// session's previous pod is over.
//
// A ResourceQuota refused the session's pod until it was raised; lull
// asked again (at most every QuotaRetryFloor) and the pod was created a
// few seconds after the last refused create. That pod lived ten minutes
// without ever becoming Ready (pulling a large image, failing its
// readiness probe), so the session's Ready condition stayed False: its
// lastTransitionTime is the pod's arrival (NextStatus resets it for a new
// pod), not a transition out of the refusal. The pod is then replaced
// (NeverStarted, a drain, an eviction) and, until the StatefulSet
// controller makes the next one, the session has none. PodCreateRefusal
// takes the last FailedCreate Event, 10 minutes old and still inside
// RefusalFresh, as current because it is less than statusLag before the
// Ready transition: the session says PodQuotaExceeded, records a Warning
// Event and lull status names the quota, although the quota has room and
// nothing refuses the pod.
func TestRefusalClearsWhenTheCauseIsGoneOldEventOfAPreviousPod(t *testing.T) {
	podArrived := now.Add(-10 * time.Minute)
	lastRefused := podArrived.Add(-5 * time.Second)
	f := newFixture()
	f.o.StatefulSet.Namespace = "ns"
	one := int32(1)
	f.o.StatefulSet.Spec.Replicas = &one
	f.o.Pod = nil // the previous pod is gone; the next is not created yet
	f.o.Session.Status.Conditions = []metav1.Condition{
		{Type: lullv1.ConditionReady, Status: metav1.ConditionFalse, Reason: "PodNotReady", LastTransitionTime: metav1.NewTime(podArrived)},
		{Type: lullv1.ConditionUpToDate, Status: metav1.ConditionFalse, Reason: lullv1.ReasonDrainRequested, LastTransitionTime: metav1.NewTime(podArrived)},
	}
	if r := PodCreateRefusal(f.o, eventsAt(lastRefused), "t"); r != nil {
		t.Fatalf("the session's previous pod existed for 10 minutes after the last refused create, yet the session is refused again: %s: %s", r.Reason, r.Message)
	}
}

func eventsAt(at time.Time) []corev1.Event { return []corev1.Event{failedCreate(quotaMessage, at)} }
