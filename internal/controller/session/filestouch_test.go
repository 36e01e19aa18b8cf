package session

import (
	"context"
	"errors"
	"testing"
	"time"

	"lull.dev/lull/internal/render"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/render/rendertest"
)

// touchFiles marks the files ConfigMap referenced before a StatefulSet is
// pointed at it, creates it again when it is gone, and writes nothing when
// the StatefulSet already names it.
func TestTouchFiles(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tmpl := rendertest.FilesTemplate(rendertest.Text("config.yaml", "a"))
	cm, err := render.FilesConfigMap(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	desired, err := render.StatefulSet(&lullv1.Session{}, tmpl, 1)
	if err != nil {
		t.Fatal(err)
	}
	if filesConfigMapOf(desired) != cm.Name {
		t.Fatalf("the rendered StatefulSet names %q, want %q", filesConfigMapOf(desired), cm.Name)
	}
	stamp := now.Format(time.RFC3339)
	get := func(c client.Client) *corev1.ConfigMap {
		t.Helper()
		got := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(cm), got); err != nil {
			t.Fatal(err)
		}
		return got
	}

	t.Run("a new StatefulSet: marked", func(t *testing.T) {
		c := filesClient(t, interceptor.Funcs{}, cm.DeepCopy())
		before := get(c).ResourceVersion
		if err := touchFiles(ctx, c, tmpl, desired, &appsv1.StatefulSet{}, now); err != nil {
			t.Fatal(err)
		}
		got := get(c)
		if got.Annotations[lullv1.AnnotationFilesReferencedAt] != stamp || got.ResourceVersion == before {
			t.Errorf("annotations %v, resourceVersion %s (was %s)", got.Annotations, got.ResourceVersion, before)
		}
	})
	t.Run("a StatefulSet naming older files: marked", func(t *testing.T) {
		c := filesClient(t, interceptor.Funcs{}, cm.DeepCopy())
		existing := desired.DeepCopy()
		for _, v := range existing.Spec.Template.Spec.Volumes {
			if v.Name == lullv1.FilesVolume {
				v.ConfigMap.Name = "coder-files-000000000000"
			}
		}
		if filesConfigMapOf(existing) != "coder-files-000000000000" {
			t.Fatal("the existing StatefulSet still names the current files")
		}
		if err := touchFiles(ctx, c, tmpl, desired, existing, now); err != nil {
			t.Fatal(err)
		}
		if got := get(c); got.Annotations[lullv1.AnnotationFilesReferencedAt] != stamp {
			t.Errorf("annotations %v", got.Annotations)
		}
	})
	t.Run("a StatefulSet already naming it: nothing written", func(t *testing.T) {
		c := filesClient(t, interceptor.Funcs{
			Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
				t.Error("patched")
				return nil
			},
		}, cm.DeepCopy())
		if err := touchFiles(ctx, c, tmpl, desired, desired.DeepCopy(), now); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("swept just before: the session waits for the template controller to create it again", func(t *testing.T) {
		c := filesClient(t, interceptor.Funcs{
			Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
				t.Error("the session created the ConfigMap; the template controller is its one writer")
				return nil
			},
		})
		var notReady errFilesNotReady
		if err := touchFiles(ctx, c, tmpl, desired, &appsv1.StatefulSet{}, now); !errors.As(err, &notReady) {
			t.Fatalf("err %v, want errFilesNotReady", err)
		}
	})
	t.Run("no files: nothing written", func(t *testing.T) {
		c := filesClient(t, interceptor.Funcs{})
		plain, err := render.StatefulSet(&lullv1.Session{}, rendertest.AgentTemplate(), 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := touchFiles(ctx, c, rendertest.AgentTemplate(), plain, &appsv1.StatefulSet{}, now); err != nil {
			t.Fatal(err)
		}
	})
}
