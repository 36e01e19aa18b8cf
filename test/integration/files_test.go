package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"lull.dev/lull/internal/render"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// TestFilesValidation checks that the API server refuses bad spec.files
// with a message naming the field and the fix, and accepts good ones.
func TestFilesValidation(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "files-validation")
	for _, tc := range []struct {
		name, files string
		want        []string // empty: accepted
	}{
		{"text and binary", `{"mountPath":"/etc/runtime","items":[{"name":"config.yaml","content":"a: 1"},{"name":"key.der","binaryContent":"AAEC"},{"name":"empty","content":""}]}`, nil},
		// Standard base64 with + and /, which the API server's CEL refuses
		// for a format byte field (kubernetes/kube-openapi#633).
		{"binary with + and /", `{"mountPath":"/etc/runtime","items":[{"name":"a","binaryContent":"/wD+"}]}`, nil},
		{"binary not base64", `{"mountPath":"/etc/runtime","items":[{"name":"a","binaryContent":"not base64!"}]}`, []string{"spec.files.items[0].binaryContent"}},
		{"relative mountPath", `{"mountPath":"etc/runtime","items":[{"name":"a","content":"x"}]}`, []string{"spec.files.mountPath", "absolute"}},
		{"mountPath with ..", `{"mountPath":"/etc/../run/lull","items":[{"name":"a","content":"x"}]}`, []string{"spec.files.mountPath", "clean path"}},
		{"mountPath /run/lull", `{"mountPath":"/run/lull","items":[{"name":"a","content":"x"}]}`, []string{"spec.files.mountPath", "/run/lull"}},
		{"mountPath under /run/lull", `{"mountPath":"/run/lull/files","items":[{"name":"a","content":"x"}]}`, []string{"spec.files.mountPath", "choose another directory"}},
		{"mountPath over the token", `{"mountPath":"/var/run/secrets/kubernetes.io/serviceaccount","items":[{"name":"a","content":"x"}]}`, []string{"spec.files.mountPath"}},
		{"mountPath /", `{"mountPath":"/","items":[{"name":"a","content":"x"}]}`, []string{"spec.files.mountPath"}},
		{"no items", `{"mountPath":"/etc/runtime","items":[]}`, []string{"spec.files.items"}},
		{"both contents", `{"mountPath":"/etc/runtime","items":[{"name":"a","content":"x","binaryContent":"AAEC"}]}`, []string{"spec.files.items", "exactly one of content"}},
		{"no content", `{"mountPath":"/etc/runtime","items":[{"name":"a"}]}`, []string{"spec.files.items", "exactly one of content"}},
		{"duplicate names", `{"mountPath":"/etc/runtime","items":[{"name":"a","content":"x"},{"name":"a","content":"y"}]}`, []string{"spec.files.items", "Duplicate"}},
		{"name with a slash", `{"mountPath":"/etc/runtime","items":[{"name":"a/b","content":"x"}]}`, []string{"spec.files.items[0].name"}},
		{"name ..", `{"mountPath":"/etc/runtime","items":[{"name":"..data","content":"x"}]}`, []string{"spec.files.items[0].name", "must not be . nor start with .."}},
		{"over 900 KiB", `{"mountPath":"/etc/runtime","items":[{"name":"a","content":"` + strings.Repeat("x", 500*1024) + `"},{"name":"b","content":"` + strings.Repeat("y", 500*1024) + `"}]}`, []string{"spec.files.items", "900 KiB"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.Map(func(r rune) rune {
				if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
					return r
				}
				return '-'
			}, strings.ToLower(tc.name))
			err := createRawSpec(ns, strings.Trim(name, "-"), `"files":`+tc.files)(t.Context())
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("got %v, want an Invalid error", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestFilesConfigMap runs the controller against the real API server: the
// files ConfigMap is created before the StatefulSet mounts it, immutable; a
// change of content is a new ConfigMap and leaves the old one; a ConfigMap
// of that name with other content is refused (RenderFailed), and the
// StatefulSet keeps what it had.
func TestFilesConfigMap(t *testing.T) {
	t.Parallel()
	ns := startManager(t)
	ctx := t.Context()
	n := runs.Add(1)

	tpl := newTemplate(ns, fmt.Sprintf("files%d", n), "example.com/runtime:v1")
	tpl.Spec.Files = &lullv1.Files{MountPath: "/etc/runtime", Items: []lullv1.FileItem{
		{Name: "config.yaml", Content: ptr.To("model: big\n")}, {Name: "key.der", BinaryContent: []byte{0xff, 0, 0xfe}}}}
	if err := admin.Create(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	s := newSession(ns, fmt.Sprintf("files%d", n), tpl.Name)
	if err := admin.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: ns, Name: s.Name}
	first := render.FilesConfigMapName(tpl)

	sts := &appsv1.StatefulSet{}
	eventually(t, 10*time.Second, "the StatefulSet mounts the files", func(ctx context.Context) error {
		if err := admin.Get(ctx, key, sts); err != nil {
			return err
		}
		if got := filesVolumeName(sts); got != first {
			return fmt.Errorf("files volume names %q, want %q", got, first)
		}
		return nil
	})
	cm := &corev1.ConfigMap{}
	if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: first}, cm); err != nil {
		t.Fatalf("the StatefulSet mounts ConfigMap %s, which does not exist: %v", first, err)
	}
	if cm.Immutable == nil || !*cm.Immutable || cm.Data["config.yaml"] != "model: big\n" || string(cm.BinaryData["key.der"]) != "\xff\x00\xfe" || cm.Labels[lullv1.LabelFiles] == "" {
		t.Errorf("ConfigMap %s: immutable %v, labels %v, data %v, binaryData %v", first, cm.Immutable, cm.Labels, cm.Data, cm.BinaryData)
	}

	t.Run("the API server keeps it immutable", func(t *testing.T) {
		edited := cm.DeepCopy()
		edited.Data["config.yaml"] = "model: small\n"
		if err := admin.Update(ctx, edited); !apierrors.IsInvalid(err) {
			t.Errorf("editing the files ConfigMap: %v, want Invalid", err)
		}
	})

	t.Run("new content: a new ConfigMap, the old one kept", func(t *testing.T) {
		if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: tpl.Name}, tpl); err != nil {
			t.Fatal(err)
		}
		tpl.Spec.Files.Items[0].Content = ptr.To("model: small\n")
		if err := admin.Update(ctx, tpl); err != nil {
			t.Fatal(err)
		}
		second := render.FilesConfigMapName(tpl)
		if second == first {
			t.Fatal("new content kept the ConfigMap name")
		}
		eventually(t, 10*time.Second, "the StatefulSet mounts the new files", func(ctx context.Context) error {
			if err := admin.Get(ctx, key, sts); err != nil {
				return err
			}
			if got := filesVolumeName(sts); got != second {
				return fmt.Errorf("files volume names %q, want %q", got, second)
			}
			return admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: second}, &corev1.ConfigMap{})
		})
		if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: first}, &corev1.ConfigMap{}); err != nil {
			t.Errorf("the first files ConfigMap, which running pods may still mount, is gone: %v", err)
		}
	})

	t.Run("a ConfigMap of that name with other content is refused", func(t *testing.T) {
		if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: tpl.Name}, tpl); err != nil {
			t.Fatal(err)
		}
		before := sts.DeepCopy()
		tpl.Spec.Files.Items[0].Content = ptr.To("model: squatted\n")
		squatter := &corev1.ConfigMap{}
		squatter.Namespace, squatter.Name = ns, render.FilesConfigMapName(tpl)
		squatter.Data = map[string]string{"config.yaml": "model: evil\n"}
		if err := admin.Create(ctx, squatter); err != nil {
			t.Fatal(err)
		}
		if err := admin.Update(ctx, tpl); err != nil {
			t.Fatal(err)
		}
		eventually(t, 15*time.Second, "the template's FilesReady says FilesConflict naming the ConfigMap", func(ctx context.Context) error {
			return filesReadyIs(ctx, ns, tpl.Name, metav1.ConditionFalse, lullv1.ReasonFilesConflict, squatter.Name, "delete or rename")
		})
		eventually(t, 15*time.Second, "the session waits for the files (FilesNotReady)", func(ctx context.Context) error {
			got := &lullv1.Session{}
			if err := admin.Get(ctx, key, got); err != nil {
				return err
			}
			c := meta.FindStatusCondition(got.Status.Conditions, lullv1.ConditionUpToDate)
			if c == nil || c.Reason != lullv1.ReasonFilesNotReady || !strings.Contains(c.Message, squatter.Name) {
				return fmt.Errorf("UpToDate = %+v", c)
			}
			return nil
		})
		if err := admin.Get(ctx, key, sts); err != nil {
			t.Fatal(err)
		}
		if got := filesVolumeName(sts); got != filesVolumeName(before) {
			t.Errorf("the StatefulSet was moved to the refused ConfigMap %s", got)
		}
		got := &corev1.ConfigMap{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(squatter), got); err != nil {
			t.Fatal(err)
		}
		if len(got.Labels) != 0 || got.Immutable != nil || got.Data["config.yaml"] != "model: evil\n" {
			t.Errorf("the squatting ConfigMap was adopted or changed: labels %v, immutable %v, data %v", got.Labels, got.Immutable, got.Data)
		}

		// Deleting it is the fix: lull creates its own, and the session moves.
		if err := admin.Delete(ctx, squatter); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "lull's ConfigMap replaces the deleted one and the StatefulSet mounts it", func(ctx context.Context) error {
			if err := filesReadyIs(ctx, ns, tpl.Name, metav1.ConditionTrue, lullv1.ReasonCreated, squatter.Name); err != nil {
				return err
			}
			if err := admin.Get(ctx, key, sts); err != nil {
				return err
			}
			if got := filesVolumeName(sts); got != squatter.Name {
				return fmt.Errorf("files volume names %q", got)
			}
			return nil
		})
	})
}

// filesReadyIs returns nil when the template's FilesReady condition has
// status and reason and its message holds every one of parts.
func filesReadyIs(ctx context.Context, ns, template string, status metav1.ConditionStatus, reason string, parts ...string) error {
	tpl := &lullv1.SessionTemplate{}
	if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: template}, tpl); err != nil {
		return err
	}
	c := meta.FindStatusCondition(tpl.Status.Conditions, lullv1.ConditionFilesReady)
	if c == nil || c.Status != status || c.Reason != reason {
		return fmt.Errorf("FilesReady = %+v, want %s %s", c, status, reason)
	}
	for _, p := range parts {
		if !strings.Contains(c.Message, p) {
			return fmt.Errorf("FilesReady message %q does not contain %q", c.Message, p)
		}
	}
	return nil
}

// filesVolumeName is the ConfigMap the StatefulSet's lull-files volume
// names, or "".
func filesVolumeName(sts *appsv1.StatefulSet) string {
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Name == lullv1.FilesVolume && v.ConfigMap != nil {
			return v.ConfigMap.Name
		}
	}
	return ""
}
