package integration

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/audit"
)

// The auditor reads pods and sessions from the API server's etcd, and
// judges them as the API server stored them: a Drained report superseded
// within milliseconds by the next pod's report still allows the deletion
// made between the two; a running pod deleted with no report is a
// violation; a pod created and deleted at once is still a deletion; and a
// Check made right after the writes judges them all. This
// is the store's real encoding (protobuf pods, JSON sessions), keys and
// revisions; the e2e chaos run restarts the API server under it.
func TestAuditorReadsTheAPIServersStore(t *testing.T) {
	ctx := t.Context()
	ns := newNamespace(t, "audit")
	auditor, err := audit.Start(ctx, etcdURL)
	if err != nil {
		t.Fatal(err)
	}

	s := newSession(ns, "s", "t")
	if err := admin.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	drained := runningSessionPod(t, ns, "s", "s-0")
	unreported := runningSessionPod(t, ns, "s", "s-1")
	fleeting := runningSessionPod(t, ns, "s", "s-2")
	if err := admin.Delete(ctx, fleeting, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}

	req := &lullv1.DrainRequest{RequestID: "update-0123456789abcdef", PodUID: drained.UID, Reason: lullv1.DrainReasonUpdate,
		RequestedAt: metav1.Now(), Sequence: 1}
	writeStatus := func(d *lullv1.DrainRequest, r *lullv1.RuntimeReport) {
		t.Helper()
		s.Status.Drain, s.Status.Runtime = d, r
		if err := admin.Status().Update(ctx, s); err != nil {
			t.Fatalf("write session status: %v", err)
		}
	}
	writeStatus(req, &lullv1.RuntimeReport{PodUID: drained.UID, State: lullv1.RuntimeDraining, ActiveTurns: 1, RequestID: req.RequestID})
	writeStatus(req, &lullv1.RuntimeReport{PodUID: drained.UID, State: lullv1.RuntimeDrained, RequestID: req.RequestID})
	if err := admin.Delete(ctx, drained, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	// At once, the next pod's report: the Drained version lived for
	// one write.
	writeStatus(nil, &lullv1.RuntimeReport{PodUID: "next-pod", State: lullv1.RuntimeServing})
	if err := admin.Delete(ctx, unreported, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}

	// No wait: Check itself waits until its watches have delivered every
	// write etcd had made.
	rep, err := auditor.Check(t.TempDir(), ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Deletions) != 3 {
		t.Fatalf("Check right after the writes judged %d deletions, want 3: %+v", len(rep.Deletions), rep.Deletions)
	}
	byUID := map[types.UID]audit.Deletion{}
	for _, d := range rep.Deletions {
		byUID[d.PodUID] = d
	}
	if d := byUID[drained.UID]; !d.Drained || d.RequestID != req.RequestID {
		t.Errorf("the pod deleted after its Drained report: %+v, want drained for %s", d, req.RequestID)
	}
	if len(rep.Violations) != 2 {
		t.Fatalf("violations %q, want the two running pods deleted without a report", rep.Violations)
	}
	for _, uid := range []types.UID{unreported.UID, fleeting.UID} {
		if d := byUID[uid]; d.Drained || audit.DeletionViolation(d) == "" {
			t.Errorf("pod %s deleted while running with no report is allowed: %+v", uid, d)
		}
	}
}

// runningSessionPod creates a pod of session in ns whose runtime container
// is running (written through the status subresource, as a kubelet would).
func runningSessionPod(t *testing.T, ns, session, name string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{lullv1.LabelSession: session}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: lullv1.RuntimeContainerName, Image: "example.com/runtime:v1"}},
			TerminationGracePeriodSeconds: ptr.To[int64](0)},
	}
	if err := admin.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
		Name: lullv1.RuntimeContainerName, Ready: true, Image: "example.com/runtime:v1", ImageID: "example.com/runtime@sha256:" + fmt.Sprintf("%064d", 0),
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}},
	}}}
	if err := admin.Status().Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	return pod
}
