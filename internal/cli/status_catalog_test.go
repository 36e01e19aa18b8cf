package cli

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// `lull status` says why a rollout does not move: as for a pause, a
// template whose runtime image has left the catalog (ImageAllowed False)
// is named with the condition's message. Its sessions whose StatefulSet
// already carries the image say only that they wait for the wave, so
// without this line nothing on screen names the catalog.
func TestStatusNamesTheCatalogHoldingARollout(t *testing.T) {
	const ns = "team-a"
	tpl := &lullv1.SessionTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rt"},
		Spec: lullv1.SessionTemplateSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: lullv1.RuntimeContainerName, Image: "registry.example.com/rt:v2"}}}}},
		Status: lullv1.SessionTemplateStatus{Sessions: 1, Stale: 1, Waiting: 1, Conditions: []metav1.Condition{{
			Type: lullv1.ConditionImageAllowed, Status: metav1.ConditionFalse, Reason: lullv1.ReasonImageNotAllowed,
			Message: `runtime image registry.example.com/rt:v2 in namespace team-a: tag v2 of registry.example.com/rt is not in RuntimeCatalog "default"`}}},
	}
	s := &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s1"}, Spec: lullv1.SessionSpec{TemplateRef: lullv1.TemplateReference{Name: "rt"}},
		Status: lullv1.SessionStatus{Conditions: []metav1.Condition{{Type: lullv1.ConditionUpToDate, Status: metav1.ConditionFalse, Reason: lullv1.ReasonWaitingForWave}}}}
	var out bytes.Buffer
	if err := printStatus(t.Context(), &out, catalogClient(tpl, s), ns, []string{"rt"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ImageAllowed=False (ImageNotAllowed)", `RuntimeCatalog "default"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("lull status does not say %q:\n%s", want, out.String())
		}
	}
}
