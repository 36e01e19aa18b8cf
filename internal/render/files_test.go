package render_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/render"
	"lull.dev/lull/internal/render/rendertest"
)

// text and bin name the fixture's two kinds of files item, which the
// tables below use on every row.
var text, bin = rendertest.Text, rendertest.Bin

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
	tmpl := rendertest.FilesTemplate(text("config.yaml", "model: big\n"), bin("key.der", []byte{0xff, 0x00, 0xfe}))
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

	if cm, err := render.FilesConfigMap(rendertest.AgentTemplate()); cm != nil || err != nil {
		t.Errorf("a template without files gave %v, %v", cm, err)
	}
	big := rendertest.FilesTemplate(text("a", strings.Repeat("é", lullv1.FilesMaxBytes/2+1))) // under the limit in characters, over it in bytes
	if _, err := render.FilesConfigMap(big); err == nil || !strings.Contains(err.Error(), "spec.files.items") {
		t.Errorf("files over %d bytes: err %v", lullv1.FilesMaxBytes, err)
	}
	both := rendertest.FilesTemplate(lullv1.FileItem{Name: "a", Content: ptr.To("x"), BinaryContent: []byte("x")})
	if _, err := render.FilesConfigMap(both); err == nil {
		t.Error("an item with both content and binaryContent was accepted")
	}
}

func TestPodMountsTheFiles(t *testing.T) {
	tmpl := rendertest.FilesTemplate(text("config.yaml", "a"))
	pod := render.Pod(rendertest.Alice(tmpl), tmpl)
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
	changed := rendertest.FilesTemplate(text("config.yaml", "b"))
	if render.TemplateRevision(changed) == rev || render.FilesConfigMapName(changed) == name {
		t.Error("new file content kept the revision or the ConfigMap name")
	}
	moved := rendertest.FilesTemplate(text("config.yaml", "a"))
	moved.Spec.Files.MountPath = "/etc/other"
	if render.TemplateRevision(moved) == rev {
		t.Error("a new mount path kept the revision")
	}
	if render.TemplateRevision(rendertest.FilesTemplate(text("config.yaml", "a"))) != rev {
		t.Error("the same files gave another revision")
	}
	if render.TemplateRevision(rendertest.AgentTemplate()) == rev {
		t.Error("adding files kept the revision")
	}
}

func TestConfigMapFilesHashIsFilesHash(t *testing.T) {
	for _, items := range [][]lullv1.FileItem{
		{text("config.yaml", "model: big\n"), bin("key.der", []byte{0xff, 0, 0xfe})},
		{bin("b", []byte{}), text("a", "")},
		{text("ab", "c")},
	} {
		tmpl := rendertest.FilesTemplate(items...)
		cm, err := render.FilesConfigMap(tmpl)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := render.ConfigMapFilesHash(cm), render.FilesHash(tmpl.Spec.Files); got != want {
			t.Errorf("%v: the ConfigMap hashes to %s, the template's files to %s", items, got, want)
		}
	}
	// Text and binary of the same bytes differ, in the ConfigMap as in the
	// template.
	cm, _ := render.FilesConfigMap(rendertest.FilesTemplate(text("a", "x")))
	cm.BinaryData = map[string][]byte{"a": []byte("x")}
	cm.Data = nil
	if render.ConfigMapFilesHash(cm) == render.FilesHash(rendertest.FilesTemplate(text("a", "x")).Spec.Files) {
		t.Error("binaryData hashed as data")
	}
}

func TestValidateRefusesAMountAtTheFilesPath(t *testing.T) {
	tmpl := rendertest.FilesTemplate(text("a", "b"))
	rt := tmpl.RuntimeContainer()
	rt.VolumeMounts = append(rt.VolumeMounts, corev1.VolumeMount{Name: "workspace", MountPath: "/etc/runtime/"})
	errs := render.Validate(tmpl)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "spec.files") {
		t.Errorf("errors %v: want one naming spec.files", errs)
	}
}
