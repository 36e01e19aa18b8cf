package render_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"lull.dev/lull/internal/render"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/render/rendertest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestPodPassesTheTemplateThrough checks that lull adds what it owns and
// leaves every other field of the template as written.
func TestPodPassesTheTemplateThrough(t *testing.T) {
	tmpl := rendertest.AgentTemplate()
	before := tmpl.DeepCopy()
	pod := render.Pod(rendertest.Alice(tmpl), tmpl)
	if !reflect.DeepEqual(tmpl, before) {
		t.Fatal("Pod changed the SessionTemplate it rendered")
	}

	// What lull owns.
	for k, v := range map[string]string{lullv1.LabelSession: "alice", lullv1.LabelTemplate: "coder", lullv1.LabelTemplateRevision: render.TemplateRevision(tmpl), "app.kubernetes.io/name": "coder"} {
		if pod.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, pod.Labels[k], v)
		}
	}
	if pod.Spec.ServiceAccountName != "lull-runtime-alice" || !ptr.Deref(pod.Spec.AutomountServiceAccountToken, false) {
		t.Errorf("serviceAccountName %q, automount %v: want the session's identity, mounted", pod.Spec.ServiceAccountName, pod.Spec.AutomountServiceAccountToken)
	}
	if ptr.Deref(pod.Spec.EnableServiceLinks, true) {
		t.Error("enableServiceLinks is not false by default")
	}
	rt := pod.Spec.Containers[0]
	var names []string
	for _, e := range rt.Env {
		names = append(names, e.Name)
	}
	if got, want := strings.Join(names, ","), "LULL_SESSION_NAME,LULL_SESSION_NAMESPACE,LULL_POD_NAME,LULL_POD_UID,WORKSPACE,SESSION"; got != want {
		t.Errorf("runtime env = %s, want %s (lull's first, so the template's may refer to them)", got, want)
	}

	// Everything else as written.
	want := before.Spec.Template.DeepCopy()
	got := pod.DeepCopy()
	got.Labels, want.Labels = nil, nil
	got.Spec.ServiceAccountName, got.Spec.AutomountServiceAccountToken, got.Spec.EnableServiceLinks = "", nil, nil
	got.Spec.Containers[0].Env = got.Spec.Containers[0].Env[4:]
	if !reflect.DeepEqual(got, want) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		t.Errorf("rendered pod differs from the template beyond lull's fields:\n got %s\nwant %s", g, w)
	}

	// A template that says enableServiceLinks keeps it.
	tmpl.Spec.Template.Spec.EnableServiceLinks = ptr.To(true)
	if pod := render.Pod(rendertest.Alice(tmpl), tmpl); !ptr.Deref(pod.Spec.EnableServiceLinks, false) {
		t.Error("the template's enableServiceLinks: true was overridden")
	}
}

// TestPodWithAgentGivesTheTokenOnlyToTheSidecar checks the injected
// sidecar: first init container, restartPolicy Always, the only container
// that mounts the token; the pod mounts none by default; the runtime
// container gets the socket and its path.
func TestPodWithAgentGivesTheTokenOnlyToTheSidecar(t *testing.T) {
	tmpl := rendertest.AgentTemplate()
	tmpl.Spec.Agent = &lullv1.AgentSpec{}
	pod := render.Pod(rendertest.Alice(tmpl), tmpl)
	if ptr.Deref(pod.Spec.AutomountServiceAccountToken, true) {
		t.Error("automountServiceAccountToken is not false with the agent sidecar")
	}
	if len(pod.Spec.InitContainers) != 2 {
		t.Fatalf("init containers = %d, want the sidecar and the template's", len(pod.Spec.InitContainers))
	}
	agent := pod.Spec.InitContainers[0]
	if agent.Name != lullv1.AgentContainerName || ptr.Deref(agent.RestartPolicy, "") != corev1.ContainerRestartPolicyAlways || agent.Image != lullv1.DefaultAgentImage {
		t.Errorf("first init container = %s (restartPolicy %v, image %s), want the native sidecar %s with the default image", agent.Name, agent.RestartPolicy, agent.Image, lullv1.AgentContainerName)
	}
	if pod.Spec.InitContainers[1].Name != "clone" {
		t.Errorf("template's init container moved: %s", pod.Spec.InitContainers[1].Name)
	}
	var token *corev1.Volume
	for i, v := range pod.Spec.Volumes {
		if v.Projected != nil && v.Name == lullv1.AgentTokenVolume {
			token = &pod.Spec.Volumes[i]
		}
	}
	if token == nil || token.Projected.Sources[0].ServiceAccountToken == nil {
		t.Fatalf("no projected token volume %s", lullv1.AgentTokenVolume)
	}
	all := append(append([]corev1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...)
	for _, c := range all {
		for _, m := range c.VolumeMounts {
			if m.Name == lullv1.AgentTokenVolume && c.Name != lullv1.AgentContainerName {
				t.Errorf("container %s mounts the session's token", c.Name)
			}
		}
	}
	rt := pod.Spec.Containers[0]
	hasEnv, hasMount := false, false
	for _, e := range rt.Env {
		hasEnv = hasEnv || e.Name == lullv1.EnvAgentSocket && e.Value == lullv1.AgentSocketPath
	}
	for _, m := range rt.VolumeMounts {
		hasMount = hasMount || m.Name == lullv1.AgentSocketVolume && m.MountPath == lullv1.AgentSocketDir
	}
	if !hasEnv || !hasMount {
		t.Errorf("runtime container: %s set %v, socket directory mounted %v", lullv1.EnvAgentSocket, hasEnv, hasMount)
	}
	for _, m := range pod.Spec.Containers[1].VolumeMounts {
		if m.Name == lullv1.AgentSocketVolume {
			t.Error("the socket is mounted in a container other than the runtime")
		}
	}
}

// TestStatefulSetGolden pins the rendered StatefulSet of a realistic
// template. A change here changes every session's pod template when lull is
// upgraded, and so replaces every session's pod: make it on purpose, and
// say so in the release notes (go test -run Golden -update rewrites it).
func TestStatefulSetGolden(t *testing.T) {
	for _, tc := range []struct {
		name         string
		agent, files bool
	}{{"statefulset", false, false}, {"statefulset-agent", true, false}, {"statefulset-files", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := rendertest.AgentTemplate()
			if tc.agent {
				tmpl.Spec.Agent = &lullv1.AgentSpec{Image: "example.com/lull:v1"}
			}
			if tc.files {
				tmpl.Spec.Files = &lullv1.Files{MountPath: "/etc/runtime", Items: []lullv1.FileItem{
					{Name: "config.yaml", Content: ptr.To("model: big\n")}, {Name: "key.der", BinaryContent: []byte{0xff, 0, 0xfe}}}}
			}
			sts, err := render.StatefulSet(rendertest.Alice(tmpl), tmpl, 1)
			if err != nil {
				t.Fatal(err)
			}
			got, err := yaml.Marshal(sts)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", tc.name+".golden.yaml")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -run Golden -update to write it)", err)
			}
			if string(got) != string(want) {
				t.Errorf("rendered StatefulSet differs from %s:\n%s", path, got)
			}
		})
	}
}

// TestRenderSurvivesTheAPIServersRoundTrip checks that a template read back
// from the API server (JSON, as stored) renders the same StatefulSet hash
// and revision as the one written.
func TestRenderSurvivesTheAPIServersRoundTrip(t *testing.T) {
	tmpl := rendertest.AgentTemplate()
	tmpl.Spec.Agent = &lullv1.AgentSpec{Image: lullv1.DefaultAgentImage}
	b, err := json.Marshal(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	back := &lullv1.SessionTemplate{}
	if err := json.Unmarshal(b, back); err != nil {
		t.Fatal(err)
	}
	a, _ := render.StatefulSet(rendertest.Alice(tmpl), tmpl, 1)
	z, _ := render.StatefulSet(rendertest.Alice(back), back, 1)
	if a.Annotations[render.AnnotationSpecHash] != z.Annotations[render.AnnotationSpecHash] || render.TemplateRevision(tmpl) != render.TemplateRevision(back) {
		t.Error("a JSON round trip of the template changed the rendered StatefulSet")
	}
}

// TestTemplateRevision checks what is part of a template's revision.
func TestTemplateRevision(t *testing.T) {
	base := rendertest.AgentTemplate()
	rev := render.TemplateRevision(base)
	for name, edit := range map[string]func(t *lullv1.SessionTemplate){
		"pod annotation": func(t *lullv1.SessionTemplate) { t.Spec.Template.Annotations["x"] = "y" },
		"toleration":     func(t *lullv1.SessionTemplate) { t.Spec.Template.Spec.Tolerations = nil },
		"sidecar image": func(t *lullv1.SessionTemplate) {
			t.Spec.Template.Spec.Containers[1].Image = "example.com/egress-proxy:4"
		},
		"claim size": func(t *lullv1.SessionTemplate) {
			t.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("20Gi")
		},
		"agent sidecar": func(t *lullv1.SessionTemplate) { t.Spec.Agent = &lullv1.AgentSpec{} },
	} {
		tmpl := base.DeepCopy()
		edit(tmpl)
		if render.TemplateRevision(tmpl) == rev {
			t.Errorf("%s: revision unchanged", name)
		}
	}
	tmpl := base.DeepCopy()
	tmpl.Spec.UpdatePolicy.Strategy = "Other"
	if render.TemplateRevision(tmpl) != rev {
		t.Error("the update policy changed the revision: changing how to roll out is not a rollout")
	}
}

// TestValidate checks the template checks made at render time, each naming
// the field.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(t *lullv1.SessionTemplate)
		want string // "" means valid
	}{
		{"realistic template", func(*lullv1.SessionTemplate) {}, ""},
		{"LULL_ variable in a sidecar", func(t *lullv1.SessionTemplate) {
			t.Spec.Template.Spec.Containers[1].Env = []corev1.EnvVar{{Name: "LULL_TOKEN", Value: "x"}}
		}, "spec.template.spec.containers[1].env[0].name"},
		{"LULL_ variable in an init container", func(t *lullv1.SessionTemplate) {
			t.Spec.Template.Spec.InitContainers[0].Env = []corev1.EnvVar{{Name: "LULL_POD_UID", Value: "x"}}
		}, "spec.template.spec.initContainers[0].env[0].name"},
		{"envFrom with the LULL_ prefix", func(t *lullv1.SessionTemplate) {
			t.Spec.Template.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{Prefix: "LULL_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}}}}
		}, "spec.template.spec.containers[0].envFrom[0].prefix"},
		{"no runtime container", func(t *lullv1.SessionTemplate) { t.Spec.Template.Spec.Containers[0].Name = "main" }, "spec.template.spec.containers"},
		{"two runtime containers", func(t *lullv1.SessionTemplate) { t.Spec.Template.Spec.Containers[1].Name = "runtime" }, "exactly one container must be named runtime"},
		{"whitespace in the runtime image", func(t *lullv1.SessionTemplate) { t.Spec.Template.Spec.Containers[0].Image = "a b" }, "spec.template.spec.containers[0].image"},
		{"two ports, one unnamed", func(t *lullv1.SessionTemplate) {
			t.Spec.Template.Spec.Containers[0].Ports = append(t.Spec.Template.Spec.Containers[0].Ports, corev1.ContainerPort{ContainerPort: 9090})
		}, "spec.template.spec.containers[0].ports[1].name"},
		{"mount at the agent's socket directory", func(t *lullv1.SessionTemplate) {
			t.Spec.Agent = &lullv1.AgentSpec{}
			t.Spec.Template.Spec.Containers[0].VolumeMounts[1].MountPath = "/run/lull/"
		}, "spec.template.spec.containers[0].volumeMounts[1].mountPath"},
		{"mount at /run/lull without the agent", func(t *lullv1.SessionTemplate) {
			t.Spec.Template.Spec.Containers[0].VolumeMounts[1].MountPath = "/run/lull"
		}, ""},
		{"a container mounts the agent's token volume", func(t *lullv1.SessionTemplate) {
			t.Spec.Agent = &lullv1.AgentSpec{}
			t.Spec.Template.Spec.Containers[1].VolumeMounts = []corev1.VolumeMount{{Name: lullv1.AgentTokenVolume, MountPath: "/t"}}
		}, "spec.template.spec.containers[1].volumeMounts[0].name"},
		{"a projected API-server token beside the agent", func(t *lullv1.SessionTemplate) {
			t.Spec.Agent = &lullv1.AgentSpec{}
			t.Spec.Template.Spec.Volumes = append(t.Spec.Template.Spec.Volumes, corev1.Volume{Name: "tok", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}})
		}, "spec.template.spec.volumes[1].projected.sources[0].serviceAccountToken.audience"},
		{"a token for a cloud's workload identity beside the agent", func(t *lullv1.SessionTemplate) {
			t.Spec.Agent = &lullv1.AgentSpec{}
			t.Spec.Template.Spec.Volumes = append(t.Spec.Template.Spec.Volumes, corev1.Volume{Name: "tok", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", Audience: "sts.amazonaws.com"}}}}}})
		}, ""},
		{"a shared process namespace beside the agent", func(t *lullv1.SessionTemplate) {
			t.Spec.Agent = &lullv1.AgentSpec{}
			t.Spec.Template.Spec.ShareProcessNamespace = ptr.To(true)
		}, "spec.template.spec.shareProcessNamespace"},
		{"a shared process namespace without the agent", func(t *lullv1.SessionTemplate) {
			t.Spec.Template.Spec.ShareProcessNamespace = ptr.To(true)
		}, ""},
		{"claim template named like a volume", func(t *lullv1.SessionTemplate) { t.Spec.VolumeClaimTemplates[0].Name = "tmp" }, "spec.volumeClaimTemplates[0].metadata.name"},
		{"two claim templates of one name", func(t *lullv1.SessionTemplate) {
			t.Spec.VolumeClaimTemplates = append(t.Spec.VolumeClaimTemplates, t.Spec.VolumeClaimTemplates[0])
		}, "spec.volumeClaimTemplates[1].metadata.name: Duplicate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := rendertest.AgentTemplate()
			tc.edit(tmpl)
			errs := render.Validate(tmpl)
			switch {
			case tc.want == "" && len(errs) > 0:
				t.Errorf("refused a valid template: %v", errs.ToAggregate())
			case tc.want != "" && (len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.want)):
				t.Errorf("errors %v, want one naming %q", errs.ToAggregate(), tc.want)
			}
			if _, err := render.StatefulSet(rendertest.Alice(tmpl), tmpl, 1); (err != nil) != (tc.want != "") {
				t.Errorf("StatefulSet error = %v, want an error: %v", err, tc.want != "")
			}
		})
	}
}

// TestExampleTemplatesRender checks the templates in examples/templates:
// they decode strictly (no field the API would drop), pass Validate, and
// render.
func TestExampleTemplatesRender(t *testing.T) {
	paths, err := filepath.Glob("../../examples/templates/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no example templates found (%v)", err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &lullv1.SessionTemplate{}
		if err := yaml.UnmarshalStrict(b, tmpl); err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		tmpl.Namespace = "ns"
		if _, err := render.StatefulSet(rendertest.Alice(tmpl), tmpl, 1); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}
