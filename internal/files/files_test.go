package files

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/render"
)

// Same accepts only the ConfigMap lull would create, byte for byte, and
// says what is wrong with any other in a Conflict that names the
// ConfigMap and the fix.
func TestSame(t *testing.T) {
	tmpl := &lullv1.SessionTemplate{Spec: lullv1.SessionTemplateSpec{Files: &lullv1.Files{MountPath: "/etc/runtime", Items: []lullv1.FileItem{
		{Name: "config.yaml", Content: ptr.To("a")}, {Name: "b", BinaryContent: []byte{1}}}}}}
	tmpl.Name, tmpl.Namespace = "agent", "ns"
	desired, err := render.FilesConfigMap(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	if err := Same(desired.DeepCopy(), desired); err != nil {
		t.Errorf("the ConfigMap lull renders: %v, want accepted", err)
	}
	for name, tc := range map[string]struct {
		edit func(cm *corev1.ConfigMap)
		why  string
	}{
		"other text":      {func(cm *corev1.ConfigMap) { cm.Data["config.yaml"] = "b" }, "holds other content"},
		"other bytes":     {func(cm *corev1.ConfigMap) { cm.BinaryData["b"] = []byte{2} }, "holds other content"},
		"an extra key":    {func(cm *corev1.ConfigMap) { cm.Data["extra"] = "" }, "holds other content"},
		"text for binary": {func(cm *corev1.ConfigMap) { delete(cm.BinaryData, "b"); cm.Data["b"] = "\x01" }, "holds other content"},
		"not lull's":      {func(cm *corev1.ConfigMap) { cm.Labels = nil }, "is not lull's"},
		"not immutable":   {func(cm *corev1.ConfigMap) { cm.Immutable = ptr.To(false) }, "is not immutable"},
	} {
		t.Run(name, func(t *testing.T) {
			existing := desired.DeepCopy()
			tc.edit(existing)
			err := Same(existing, desired)
			var conflict Conflict
			if !errors.As(err, &conflict) || conflict.Name != desired.Name || !strings.HasPrefix(conflict.Why, tc.why) || !strings.Contains(err.Error(), "delete or rename") {
				t.Errorf("Same = %v; want a Conflict naming %s, saying %q and the fix", err, desired.Name, tc.why)
			}
		})
	}
}
