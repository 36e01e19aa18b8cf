package podprocess

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestVariableReferencesAreExpanded: a kubelet expands $(NAME) in a
// container's env values, command and args with the variables defined
// before it, and $$ escapes a $. docs/templates.md promises that a
// template's variables may use lull's (value: "sessions/$(LULL_SESSION_NAME)");
// under lull dev the runtime process must see what it would see in a pod.
func TestVariableReferencesAreExpanded(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice-0", UID: "uid-1"}}
	c := &corev1.Container{
		Name: "runtime",
		Env: []corev1.EnvVar{
			{Name: "LULL_SESSION_NAME", Value: "alice"},
			{Name: "LULL_POD_UID", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}},
			{Name: "SESSION", Value: "sessions/$(LULL_SESSION_NAME)"},
			{Name: "LITERAL", Value: "$$(LULL_SESSION_NAME)"},
			{Name: "UNKNOWN", Value: "$(NOPE)"},
		},
		Args: []string{"--id=$(LULL_SESSION_NAME)/$(LULL_POD_UID)"},
	}
	r := newRunner(Options{Dir: t.TempDir(), Command: func(_ *corev1.Pod, c *corev1.Container) (string, []string) {
		return "/bin/true", c.Args
	}}, fake.NewClientset())
	got, err := r.container(pod, c, map[string]string{}, "", "/dev/null", false)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SESSION=sessions/alice", "LITERAL=$(LULL_SESSION_NAME)", "UNKNOWN=$(NOPE)"} {
		if !slices.Contains(got.env, want) {
			t.Errorf("env has no %q: %q", want, got.env)
		}
	}
	if want := "--id=alice/uid-1"; !slices.Contains(got.args, want) {
		t.Errorf("args = %q, want %q", got.args, want)
	}
}
