package rollout

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Review round 2 of issue 21, guarantee 1: a runtime that has reported
// from its pod since its container last terminated is not judged failed.
//
// The order of report and termination was judged on the API server's
// clock against StatusWrittenAt, the latest status write by any manager.
// A write of the pod's status by another party after the report (a
// readiness-gate controller setting its condition, the DisruptionTarget
// condition of an eviction or a node's taint manager, another
// container's change the kubelet publishes before it publishes the
// runtime's restart) moves StatusWrittenAt past the report, so the API
// server's clock no longer orders them; what is left is the cross-clock
// comparison, which a node clock ahead by more than the back-off defeats.
// Here, the node's clock 15 s ahead (as TestReportFresherThanFailureWhateverTheNodeClock),
// the restarted runtime reported Serving with a turn 11 s after its crash
// was published, a readiness-gate controller wrote the pod's status a
// second later, and the kubelet still shows CrashLoopBackOff: the pod is
// judged failed and replaced without a drain, its turn lost.
//
// StatusWrittenAt is now the latest write that owns the pod's
// status.containerStatuses, which the fixture's entries show as the API
// server does: the kubelet's owns them, the readiness gate's its
// condition alone.
func TestReportFresherThanFailureWhenAnotherPartyWritesThePodStatusAfterIt(t *testing.T) {
	const skew = 15 * time.Second // node ahead of the API server
	crashed := now.Add(-11 * time.Second)
	f := newFixture()
	f.o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{crashLooping(crashed.Add(skew))}
	f.o.Pod.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", Time: &metav1.Time{Time: crashed}, FieldsV1: containerStatusesFields},
		// A readiness-gate controller's condition, a second after the report.
		{Manager: "aws-load-balancer-controller", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", Time: &metav1.Time{Time: now.Add(time.Second)},
			FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:conditions":{"k:{\"type\":\"target-health.elbv2.k8s.aws/tg\"}":{".":{},"f:status":{},"f:type":{}}}}}`)}},
	}
	f.o.Session.Status.Runtime = report(podUID, "", lullv1.RuntimeServing, 1)
	f.o.ReportWrittenAt = now
	f.o.Now = now.Add(2 * time.Second)
	a := decide(f.o)
	if a.Kind == Commit && a.Replacement != nil && a.Replacement.Reason == lullv1.ReplacementPodFailed {
		t.Fatalf("a runtime that reported (a turn open) 11 s after its crash was published is judged failed once another party wrote the pod's status after the report: %s", a.Message)
	}
}
