package template

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/catalog/catalogtest"
	"lull.dev/lull/internal/rollout"
)

func catalogTemplate(image string) *lullv1.SessionTemplate {
	return &lullv1.SessionTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: catalogtest.NamespaceB, Name: "rt", Generation: 3},
		Spec: lullv1.SessionTemplateSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: lullv1.RuntimeContainerName, Image: image}}}}},
	}
}

func TestImageCondition(t *testing.T) {
	cat := catalogtest.Catalog()
	for _, tc := range []struct {
		name   string
		cat    *lullv1.RuntimeCatalog
		image  string
		status metav1.ConditionStatus
		reason string
		msg    []string
	}{
		{"no catalog", nil, "anything:v1", metav1.ConditionTrue, lullv1.ReasonNoCatalog, []string{"every image is allowed"}},
		{"listed", cat, "registry.example.com/agent-runtime:v1", metav1.ConditionTrue, lullv1.ReasonInCatalog, []string{`RuntimeCatalog "default"`}},
		{"not listed for the namespace", cat, "registry.example.com/scoped:v1", metav1.ConditionFalse, lullv1.ReasonImageNotAllowed,
			[]string{"registry.example.com/scoped:v1", "namespace " + catalogtest.NamespaceB, `RuntimeCatalog "default"`, "lull catalog", "running sessions are left alone"}},
	} {
		c := ImageCondition(catalogTemplate(tc.image), tc.cat)
		if c.Type != lullv1.ConditionImageAllowed || c.Status != tc.status || c.Reason != tc.reason || c.ObservedGeneration != 3 {
			t.Errorf("%s: %+v, want %s %s", tc.name, c, tc.status, tc.reason)
		}
		for _, m := range tc.msg {
			if !strings.Contains(c.Message, m) {
				t.Errorf("%s: message %q lacks %q", tc.name, c.Message, m)
			}
		}
	}
}

// While the image is not allowed, the wave admits nobody new (like the
// brake); those already admitted keep their place.
func TestNextStatusAdmitsNobodyWhileImageNotAllowed(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	tmpl := catalogTemplate("registry.example.com/agent-runtime:v3")
	stale := func(name string) lullv1.Session {
		s := lullv1.Session{ObjectMeta: metav1.ObjectMeta{Name: name}}
		s.Status.TemplateRevision = "old"
		s.Status.Conditions = []metav1.Condition{
			{Type: lullv1.ConditionReady, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))},
			{Type: lullv1.ConditionUpToDate, Status: metav1.ConditionFalse, Reason: "WaitingForWave"},
		}
		return s
	}
	sessions := []lullv1.Session{stale("a"), stale("b"), stale("c"), stale("d")}

	allowed := tmpl.DeepCopy()
	meta.SetStatusCondition(&allowed.Status.Conditions, ImageCondition(tmpl, nil))
	if st, _ := rollout.NextTemplateStatus(allowed, sessions, now, 30*time.Second, true); len(st.Wave) != 1 {
		t.Fatalf("image allowed: wave %v, want one admitted", st.Wave)
	}

	refused := tmpl.DeepCopy()
	meta.SetStatusCondition(&refused.Status.Conditions, ImageCondition(tmpl, catalogtest.Catalog()))
	refused.Status.Wave = []lullv1.WaveEntry{{Session: "a", Sequence: 1, AdmittedAt: metav1.NewTime(now)}}
	st, _ := rollout.NextTemplateStatus(refused, sessions, now, 30*time.Second, true)
	if len(st.Wave) != 1 || st.Wave[0].Session != "a" {
		t.Errorf("image not allowed: wave %v, want only the session already admitted", st.Wave)
	}
	if st.ExpectedCompletion != nil {
		t.Errorf("image not allowed: expected completion %v, want none", st.ExpectedCompletion)
	}
	if c := meta.FindStatusCondition(st.Conditions, lullv1.ConditionImageAllowed); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("status conditions %v lack ImageAllowed=False", st.Conditions)
	}
}
