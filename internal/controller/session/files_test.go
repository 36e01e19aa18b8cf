package session

import (
	"context"
	"errors"
	"strings"
	"testing"

	"lull.dev/lull/internal/render"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/testenv"
	"lull.dev/lull/internal/files"
	"lull.dev/lull/internal/render/rendertest"
)

func filesClient(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) client.Client {
	t.Helper()
	sch := testenv.Scheme()
	return interceptor.NewClient(withSessionIndex(fake.NewClientBuilder(), sch).WithScheme(sch).WithObjects(objs...).Build(), funcs)
}

func TestCreateFiles(t *testing.T) {
	ctx := context.Background()
	tmpl := rendertest.FilesTemplate(rendertest.Text("config.yaml", "a"), rendertest.Bin("b", []byte{1}))
	want, err := render.FilesConfigMap(tmpl)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("absent: created, then present", func(t *testing.T) {
		c := filesClient(t, interceptor.Funcs{})
		if created, err := files.Create(ctx, c, c, want); err != nil || !created {
			t.Fatalf("created %v, err %v; want created", created, err)
		}
		got := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(want), got); err != nil {
			t.Fatal(err)
		}
		if err := files.Same(got, want); err != nil {
			t.Error(err)
		}
		if created, err := files.Create(ctx, c, c, want); err != nil || created {
			t.Errorf("second call: created %v, err %v; want present", created, err)
		}
		if err := filesReady(ctx, c, c, tmpl); err != nil {
			t.Errorf("filesReady once created: %v", err)
		}
		if err := filesReady(ctx, c, c, rendertest.AgentTemplate()); err != nil {
			t.Errorf("a template without files: %v", err)
		}
	})

	t.Run("refused by the API server: its error, not created", func(t *testing.T) {
		quota := apierrors.NewForbidden(corev1.Resource("configmaps"), want.Name, errors.New("exceeded quota: q, requested: count/configmaps=1"))
		c := filesClient(t, interceptor.Funcs{Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error { return quota }})
		created, err := files.Create(ctx, c, c, want)
		if created || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want.Name) {
			t.Errorf("created %v, err %v; want the Forbidden error naming %s", created, err, want.Name)
		}
		var notReady errFilesNotReady
		if err := filesReady(ctx, c, c, tmpl); !errors.As(err, &notReady) || !strings.Contains(err.Error(), "FilesReady") {
			t.Errorf("filesReady without the ConfigMap: %v; want errFilesNotReady pointing at FilesReady", err)
		}
	})

	// The cache has not seen it; the create meets it on the server.
	notInCache := func(existing *corev1.ConfigMap) (client.Client, client.Reader) {
		live := filesClient(t, interceptor.Funcs{}, existing)
		c := filesClient(t, interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
				return apierrors.NewNotFound(corev1.Resource("configmaps"), key.Name)
			},
			Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
				return apierrors.NewAlreadyExists(corev1.Resource("configmaps"), o.GetName())
			},
		})
		return c, live
	}
	t.Run("AlreadyExists with the same bytes: accepted", func(t *testing.T) {
		c, live := notInCache(want.DeepCopy())
		if _, err := files.Create(ctx, c, live, want); err != nil {
			t.Error(err)
		}
		if err := filesReady(ctx, c, live, tmpl); err != nil {
			t.Errorf("filesReady reads a cache miss through live: %v", err)
		}
	})
	for name, edit := range map[string]func(cm *corev1.ConfigMap){
		"other text":      func(cm *corev1.ConfigMap) { cm.Data["config.yaml"] = "b" },
		"other bytes":     func(cm *corev1.ConfigMap) { cm.BinaryData["b"] = []byte{2} },
		"an extra key":    func(cm *corev1.ConfigMap) { cm.Data["extra"] = "" },
		"text for binary": func(cm *corev1.ConfigMap) { delete(cm.BinaryData, "b"); cm.Data["b"] = "\x01" },
		"not lull's":      func(cm *corev1.ConfigMap) { cm.Labels = nil },
		"not immutable":   func(cm *corev1.ConfigMap) { cm.Immutable = nil },
	} {
		t.Run("AlreadyExists with "+name+": refused", func(t *testing.T) {
			existing := want.DeepCopy()
			edit(existing)
			c, live := notInCache(existing)
			_, err := files.Create(ctx, c, live, want)
			var conflict files.Conflict
			if !errors.As(err, &conflict) || conflict.Name != want.Name || !strings.Contains(err.Error(), "delete or rename") {
				t.Errorf("err %v: want a files.Conflict naming %s and the fix", err, want.Name)
			}
			var notReady errFilesNotReady
			if err := filesReady(ctx, c, live, tmpl); !errors.As(err, &notReady) || !strings.Contains(err.Error(), conflict.Why) {
				t.Errorf("filesReady: %v; want errFilesNotReady saying %q", err, conflict.Why)
			}
		})
	}

	t.Run("spec.files the controller refuses: RenderFailed, not a wait", func(t *testing.T) {
		big := rendertest.FilesTemplate(rendertest.Text("a", strings.Repeat("\u00e9", lullv1.FilesMaxBytes/2+1)))
		c := filesClient(t, interceptor.Funcs{})
		var invalid errInvalidTemplate
		if err := filesReady(ctx, c, c, big); !errors.As(err, &invalid) {
			t.Errorf("filesReady: %v; want errInvalidTemplate", err)
		}
	})
}
