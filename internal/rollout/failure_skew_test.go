package rollout

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// A runtime that has reported from its pod since its container last
// terminated is not judged failed, whatever the node's clock says: the
// report's write and the kubelet's publication of the termination are
// ordered on the API server's clock alone (StatusWrittenAt).
//
// With the node's clock 15 s ahead of the API server's, a runtime
// container that crashed, waited out the 10 s CrashLoopBackOff, restarted,
// reported Serving and accepted a turn shows a termination (finishedAt,
// the node's clock) later than its report (the API server's), though the
// report came 11 s after it. Within the kubelet's lag the pod still shows
// CrashLoopBackOff; the API server saw that status written when the crash
// was published, 11 s before the report. A report from before the crash
// stays older than that write, and the pod is failed.
func TestReportFresherThanFailureWhateverTheNodeClock(t *testing.T) {
	const skew = 15 * time.Second // node ahead of the API server
	crashed := now.Add(-11 * time.Second)
	for _, c := range []struct {
		name       string
		reportedAt time.Time // on the API server's clock
		failed     bool
	}{
		{"restarted runtime reported after the crash was published", now, false},
		{"report from the run that crashed", crashed.Add(-3 * time.Second), true},
		{"report in the second the crash was published", crashed, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture()
			f.o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{crashLooping(crashed.Add(skew))}
			f.o.Pod.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate,
				Subresource: "status", Time: &metav1.Time{Time: crashed}, FieldsV1: containerStatusesFields}}
			f.o.Session.Status.Runtime = report(podUID, "", lullv1.RuntimeServing, 1)
			f.o.ReportWrittenAt = c.reportedAt
			a := decide(f.o)
			failed := a.Kind == Commit && a.Replacement != nil && a.Replacement.Reason == lullv1.ReplacementPodFailed
			if failed != c.failed {
				t.Fatalf("judged failed %v, want %v (node clock %s ahead): %s %s", failed, c.failed, skew, a.Kind, a.Message)
			}
		})
	}
}

// containerStatusesFields is the fieldsV1 of a write that publishes the
// pod's container states, as the kubelet's entry shows it.
var containerStatusesFields = &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:conditions":{},"f:containerStatuses":{},"f:phase":{}}}`)}

// StatusWrittenAt is the latest write of the pod's status subresource that
// owns status.containerStatuses, whatever its manager's name: writes of
// the pod's spec or metadata, and status writes of conditions alone (a
// DisruptionTarget, a readiness gate), do not count.
func TestStatusWrittenAtReadsOnlyWritesOfContainerStates(t *testing.T) {
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(d)} }
	conditions := &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:conditions":{}}}`)}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{
		{Manager: "kube-controller-manager", Time: at(0), FieldsV1: containerStatusesFields},
		{Manager: "kwok", Subresource: "status", Time: at(-5 * time.Second), FieldsV1: containerStatusesFields},
		{Manager: "kubelet", Subresource: "status", Time: at(-3 * time.Second), FieldsV1: containerStatusesFields},
		{Manager: "kube-controller-manager", Subresource: "status", Time: at(-1 * time.Second), FieldsV1: conditions},
		{Manager: "readiness-gate", Subresource: "status", Time: at(-1 * time.Second)},
		{Manager: "kubelet", Subresource: "status", FieldsV1: containerStatusesFields},
	}}}
	if got := StatusWrittenAt(pod); !got.Equal(now.Add(-3 * time.Second)) {
		t.Errorf("StatusWrittenAt = %s, want %s", got, now.Add(-3*time.Second))
	}
	if got := StatusWrittenAt(&corev1.Pod{}); !got.IsZero() {
		t.Errorf("StatusWrittenAt of a pod without managed fields = %s, want zero", got)
	}
}
