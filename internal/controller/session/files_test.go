package session

import (
	"context"
	"errors"
	"strings"
	"testing"

	"lull.dev/lull/internal/render"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

func text(name, content string) lullv1.FileItem {
	return lullv1.FileItem{Name: name, Content: ptr.To(content)}
}

func bin(name string, b []byte) lullv1.FileItem {
	return lullv1.FileItem{Name: name, BinaryContent: b}
}

// filesTemplate is agentTemplate with files.
func filesTemplate(items ...lullv1.FileItem) *lullv1.SessionTemplate {
	tmpl := agentTemplate()
	tmpl.Spec.Files = &lullv1.Files{MountPath: "/etc/runtime", Items: items}
	return tmpl
}

func filesHash(items ...lullv1.FileItem) string {
	return render.FilesHash(&lullv1.Files{MountPath: "/x", Items: items})
}

func TestFilesHashIsAContentAddress(t *testing.T) {
	a := filesHash(text("a.yaml", "x: 1"), bin("b.bin", []byte{0, 1, 2}))
	if len(a) != 12 {
		t.Fatalf("hash %q: want 12 hex characters", a)
	}
	if b := filesHash(text("a.yaml", "x: 1"), bin("b.bin", []byte{0, 1, 2})); a != b {
		t.Errorf("same files hash differently: %s, %s", a, b)
	}
	if b := filesHash(bin("b.bin", []byte{0, 1, 2}), text("a.yaml", "x: 1")); a != b {
		t.Errorf("the order of items changed the hash: %s, %s", a, b)
	}
	// Every pair here differs; a naive concatenation of names and contents
	// would give some of them the same input.
	distinct := map[string][]lullv1.FileItem{
		"ab=c":     {text("ab", "c")},
		"a=bc":     {text("a", "bc")},
		"a=b,c=d":  {text("a", "b"), text("c", "d")},
		"a=bc=d":   {text("a", "bc=d")},
		"a=b c=":   {text("a", "b"), text("c", "")},
		"a bin bc": {bin("a", []byte("bc"))},
		"a=":       {text("a", "")},
		"b=":       {text("b", "")},
		"a=x":      {text("a", "x")},
		"a=y":      {text("a", "y")},
		"a bin 0":  {bin("a", []byte{0})},
	}
	seen := map[string]string{}
	for name, items := range distinct {
		h := filesHash(items...)
		if other, ok := seen[h]; ok {
			t.Errorf("%s and %s share the hash %s", name, other, h)
		}
		seen[h] = name
	}
	// The mount path is the pod's, not the ConfigMap's.
	if render.FilesHash(&lullv1.Files{MountPath: "/a", Items: []lullv1.FileItem{text("a", "b")}}) != render.FilesHash(&lullv1.Files{MountPath: "/b", Items: []lullv1.FileItem{text("a", "b")}}) {
		t.Error("the mount path changed the content address")
	}
}

func TestFilesConfigMap(t *testing.T) {
	tmpl := filesTemplate(text("config.yaml", "model: big\n"), bin("key.der", []byte{0xff, 0x00, 0xfe}))
	cm, err := render.FilesConfigMap(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	h := render.FilesHash(tmpl.Spec.Files)
	if cm.Name != "coder-files-"+h || cm.Namespace != "agents" {
		t.Errorf("ConfigMap %s/%s, want agents/coder-files-%s", cm.Namespace, cm.Name, h)
	}
	if cm.Immutable == nil || !*cm.Immutable {
		t.Error("the files ConfigMap is not immutable")
	}
	if cm.Labels[lullv1.LabelFiles] != h || cm.Labels[lullv1.LabelTemplate] != "coder" {
		t.Errorf("labels %v", cm.Labels)
	}
	if len(cm.OwnerReferences) != 0 {
		t.Error("the files ConfigMap has an owner: it must outlive a template for the pods still mounting it")
	}
	if cm.Data["config.yaml"] != "model: big\n" || string(cm.BinaryData["key.der"]) != "\xff\x00\xfe" || len(cm.Data) != 1 || len(cm.BinaryData) != 1 {
		t.Errorf("data %v, binaryData %v", cm.Data, cm.BinaryData)
	}
	// The longest template name still gives a valid ConfigMap name.
	tmpl.Name = strings.Repeat("t", 63)
	if n := render.FilesConfigMapName(tmpl); len(n) != 63+len("-files-")+12 || len(n) > 253 {
		t.Errorf("name %q", n)
	}

	if cm, err := render.FilesConfigMap(agentTemplate()); cm != nil || err != nil {
		t.Errorf("a template without files gave %v, %v", cm, err)
	}
	big := filesTemplate(text("a", strings.Repeat("é", lullv1.FilesMaxBytes/2+1))) // under the limit in characters, over it in bytes
	if _, err := render.FilesConfigMap(big); err == nil || !strings.Contains(err.Error(), "spec.files.items") {
		t.Errorf("files over %d bytes: err %v", lullv1.FilesMaxBytes, err)
	}
	both := filesTemplate(lullv1.FileItem{Name: "a", Content: ptr.To("x"), BinaryContent: []byte("x")})
	if _, err := render.FilesConfigMap(both); err == nil {
		t.Error("an item with both content and binaryContent was accepted")
	}
}

func TestPodMountsTheFiles(t *testing.T) {
	tmpl := filesTemplate(text("config.yaml", "a"))
	pod := render.Pod(aliceOf(tmpl), tmpl)
	var vol *corev1.Volume
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == lullv1.FilesVolume {
			vol = &pod.Spec.Volumes[i]
		}
	}
	if vol == nil || vol.ConfigMap == nil || vol.ConfigMap.Name != render.FilesConfigMapName(tmpl) {
		t.Fatalf("volume %s: %+v", lullv1.FilesVolume, vol)
	}
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		for _, m := range c.VolumeMounts {
			if m.Name != lullv1.FilesVolume {
				continue
			}
			if c.Name != lullv1.RuntimeContainerName {
				t.Errorf("the files are mounted in %s", c.Name)
			}
			if m.MountPath != "/etc/runtime" || m.SubPath != "" || !m.ReadOnly {
				t.Errorf("mount %+v: want /etc/runtime, read-only, no subPath", m)
			}
		}
	}

	// New content is a new revision and a new ConfigMap; the order of the
	// items and an unchanged template are not.
	rev, name := render.TemplateRevision(tmpl), render.FilesConfigMapName(tmpl)
	changed := filesTemplate(text("config.yaml", "b"))
	if render.TemplateRevision(changed) == rev || render.FilesConfigMapName(changed) == name {
		t.Error("new file content kept the revision or the ConfigMap name")
	}
	moved := filesTemplate(text("config.yaml", "a"))
	moved.Spec.Files.MountPath = "/etc/other"
	if render.TemplateRevision(moved) == rev {
		t.Error("a new mount path kept the revision")
	}
	if render.TemplateRevision(filesTemplate(text("config.yaml", "a"))) != rev {
		t.Error("the same files gave another revision")
	}
	if render.TemplateRevision(agentTemplate()) == rev {
		t.Error("adding files kept the revision")
	}
}

func TestValidateRefusesAMountAtTheFilesPath(t *testing.T) {
	tmpl := filesTemplate(text("a", "b"))
	rt := tmpl.RuntimeContainer()
	rt.VolumeMounts = append(rt.VolumeMounts, corev1.VolumeMount{Name: "workspace", MountPath: "/etc/runtime/"})
	errs := render.Validate(tmpl)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "spec.files") {
		t.Errorf("errors %v: want one naming spec.files", errs)
	}
}

func filesClient(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) client.Client {
	t.Helper()
	sch := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(sch); err != nil {
		t.Fatal(err)
	}
	return interceptor.NewClient(withSessionIndex(fake.NewClientBuilder(), sch).WithScheme(sch).WithObjects(objs...).Build(), funcs)
}

func TestCreateFiles(t *testing.T) {
	ctx := context.Background()
	tmpl := filesTemplate(text("config.yaml", "a"), bin("b", []byte{1}))
	want, err := render.FilesConfigMap(tmpl)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("absent: created, then present", func(t *testing.T) {
		c := filesClient(t, interceptor.Funcs{})
		if created, err := CreateFiles(ctx, c, c, want); err != nil || !created {
			t.Fatalf("created %v, err %v; want created", created, err)
		}
		got := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(want), got); err != nil {
			t.Fatal(err)
		}
		if err := SameFiles(got, want); err != nil {
			t.Error(err)
		}
		if created, err := CreateFiles(ctx, c, c, want); err != nil || created {
			t.Errorf("second call: created %v, err %v; want present", created, err)
		}
		if err := filesReady(ctx, c, c, tmpl); err != nil {
			t.Errorf("filesReady once created: %v", err)
		}
		if err := filesReady(ctx, c, c, agentTemplate()); err != nil {
			t.Errorf("a template without files: %v", err)
		}
	})

	t.Run("refused by the API server: its error, not created", func(t *testing.T) {
		quota := apierrors.NewForbidden(corev1.Resource("configmaps"), want.Name, errors.New("exceeded quota: q, requested: count/configmaps=1"))
		c := filesClient(t, interceptor.Funcs{Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error { return quota }})
		created, err := CreateFiles(ctx, c, c, want)
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
		if _, err := CreateFiles(ctx, c, live, want); err != nil {
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
			_, err := CreateFiles(ctx, c, live, want)
			var conflict FilesConflict
			if !errors.As(err, &conflict) || conflict.Name != want.Name || !strings.Contains(err.Error(), "delete or rename") {
				t.Errorf("err %v: want a FilesConflict naming %s and the fix", err, want.Name)
			}
			var notReady errFilesNotReady
			if err := filesReady(ctx, c, live, tmpl); !errors.As(err, &notReady) || !strings.Contains(err.Error(), conflict.Why) {
				t.Errorf("filesReady: %v; want errFilesNotReady saying %q", err, conflict.Why)
			}
		})
	}

	t.Run("spec.files the controller refuses: RenderFailed, not a wait", func(t *testing.T) {
		big := filesTemplate(text("a", strings.Repeat("\u00e9", lullv1.FilesMaxBytes/2+1)))
		c := filesClient(t, interceptor.Funcs{})
		var invalid errInvalidTemplate
		if err := filesReady(ctx, c, c, big); !errors.As(err, &invalid) {
			t.Errorf("filesReady: %v; want errInvalidTemplate", err)
		}
	})
}
