package cli

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// `lull status` shows a session whose pod another controller cannot
// create as blocked, with the refusal, not as merely pending.
func TestStatusShowsARefusedPodAsBlocked(t *testing.T) {
	const ns = "team-a"
	tpl := &lullv1.SessionTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rt"},
		Spec: lullv1.SessionTemplateSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: lullv1.RuntimeContainerName, Image: "registry.example.com/rt:v2"}}}}},
		Status: lullv1.SessionTemplateStatus{Sessions: 1},
	}
	const msg = `the StatefulSet controller cannot create the pod of StatefulSet s1: create Pod s1-0 in StatefulSet s1 failed error: pods "s1-0" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=4, limited: pods=4; raise ResourceQuota pods of namespace team-a`
	s := &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s1"}, Spec: lullv1.SessionSpec{TemplateRef: lullv1.TemplateReference{Name: "rt"}},
		Status: lullv1.SessionStatus{Phase: lullv1.SessionPending, Conditions: []metav1.Condition{{Type: lullv1.ConditionUpToDate, Status: metav1.ConditionUnknown,
			Reason: lullv1.ReasonPodQuotaExceeded, Message: msg}}}}
	var out bytes.Buffer
	if err := printStatus(t.Context(), &out, catalogClient(tpl, s), ns, []string{"rt"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"BLOCKED: " + lullv1.ReasonPodQuotaExceeded, "exceeded quota: pods", "raise ResourceQuota pods"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("lull status does not say %q:\n%s", want, out.String())
		}
	}
}

// `lull status` lists a session whose pod's node is lost, with the
// node, its state and the manual step in the Session's own words.
func TestStatusListsASessionOnALostNode(t *testing.T) {
	const ns = "team-a"
	tpl := &lullv1.SessionTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rt"},
		Spec: lullv1.SessionTemplateSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: lullv1.RuntimeContainerName, Image: "registry.example.com/rt:v2"}}}}},
		Status: lullv1.SessionTemplateStatus{Sessions: 1},
	}
	const msg = "pod s1-0 is bound to node node-7, which is NotReady (Ready=Unknown, NodeStatusUnknown) since 2026-12-02T21:00:00Z: its runtime cannot answer; " +
		"lull never force-deletes the pod; once the machine is known to be gone, delete the Node (kubectl delete node node-7)"
	s := &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s1"}, Spec: lullv1.SessionSpec{TemplateRef: lullv1.TemplateReference{Name: "rt"}},
		Status: lullv1.SessionStatus{Phase: lullv1.SessionRunning, Conditions: []metav1.Condition{
			{Type: lullv1.ConditionReady, Status: metav1.ConditionFalse, Reason: lullv1.ReasonNodeLost, Message: msg},
			{Type: lullv1.ConditionUpToDate, Status: metav1.ConditionTrue, Reason: lullv1.ReasonUpToDate}}}}
	var out bytes.Buffer
	if err := printStatus(t.Context(), &out, catalogClient(tpl, s), ns, []string{"rt"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"NODE LOST", "sessions on a lost node", "node node-7, which is NotReady (Ready=Unknown, NodeStatusUnknown) since", "kubectl delete node node-7"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("lull status does not say %q:\n%s", want, out.String())
		}
	}
}
