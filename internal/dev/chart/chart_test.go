package chart

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// everythingOn turns on every optional part of the chart and sets every
// scheduling and image value away from its default.
var everythingOn = map[string]any{
	"serviceMonitor":      map[string]any{"enabled": true, "interval": "15s", "labels": map[string]any{"release": "prometheus"}},
	"dashboard":           map[string]any{"enabled": true},
	"podDisruptionBudget": map[string]any{"enabled": true, "minAvailable": 1},
	"image":               map[string]any{"repository": "registry.example.com/lull-controller", "digest": "sha256:" + strings.Repeat("ab", 32), "pullPolicy": "Always"},
	"imagePullSecrets":    []any{map[string]any{"name": "pull"}},
	"watchNamespace":      "sessions",
	"extraArgs":           []any{"--max-concurrent-reconciles=32"},
	"podAnnotations":      map[string]any{"example.com/a": "b"},
	"podLabels":           map[string]any{"team": "platform"},
	"nodeSelector":        map[string]any{"kubernetes.io/os": "linux"},
	"tolerations":         []any{map[string]any{"key": "dedicated", "operator": "Equal", "value": "platform", "effect": "NoSchedule"}},
	"affinity": map[string]any{"podAntiAffinity": map[string]any{"preferredDuringSchedulingIgnoredDuringExecution": []any{
		map[string]any{"weight": 100, "podAffinityTerm": map[string]any{"topologyKey": "kubernetes.io/hostname",
			"labelSelector": map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/name": "lull"}}}}}}},
	"priorityClassName": "system-cluster-critical",
	"serviceAccount":    map[string]any{"annotations": map[string]any{"example.com/role": "lull"}},
}

// TestLint runs `helm lint --strict` (Helm's lint package): with the
// default values and with every optional part on, no warning and no
// error.
func TestLint(t *testing.T) {
	kv, err := chartutil.ParseKubeVersion(MinKubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	for name, values := range map[string]map[string]any{"defaults": {}, "everything on": everythingOn} {
		t.Run(name, func(t *testing.T) {
			lint := action.NewLint()
			lint.Strict, lint.Namespace, lint.KubeVersion = true, "lull-system", kv
			res := lint.Run([]string{Dir()}, values)
			if res.TotalChartsLinted != 1 {
				t.Fatalf("linted %d charts, want 1", res.TotalChartsLinted)
			}
			for _, m := range res.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("lint: %s", m)
				}
			}
			for _, err := range res.Errors {
				t.Errorf("lint: %v", err)
			}
		})
	}
}

func render(t *testing.T, opts Options) []*unstructured.Unstructured {
	t.Helper()
	objs, err := Render(opts)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return objs
}

// only returns the one object of kind in objs, converted to T; it fails
// the test when there is none or more than one.
func only[T any](t *testing.T, objs []*unstructured.Unstructured, kind string) *T {
	t.Helper()
	var found []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("rendered %d objects of kind %s, want 1", len(found), kind)
	}
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(found[0].Object, out, true); err != nil {
		t.Fatalf("%s %s: %v", kind, found[0].GetName(), err)
	}
	return out
}

func count(objs []*unstructured.Unstructured, kind string) int {
	n := 0
	for _, o := range objs {
		if o.GetKind() == kind {
			n++
		}
	}
	return n
}

func controllerContainer(t *testing.T, d *appsv1.Deployment) corev1.Container {
	t.Helper()
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("Deployment has %d containers, want the controller alone", len(d.Spec.Template.Spec.Containers))
	}
	return d.Spec.Template.Spec.Containers[0]
}

// TestRenderDefaults: the defaults are a production install: two
// replicas with leader election in the release namespace, the restricted
// Pod Security Standard, probes on the controller's health endpoints, a
// PodDisruptionBudget, GOMEMLIMIT from the memory limit, and no
// ServiceMonitor or dashboard (their CRD and Grafana are the operator's
// choice).
func TestRenderDefaults(t *testing.T) {
	objs := render(t, Options{Release: "lull", Namespace: "ops"})
	d := only[appsv1.Deployment](t, objs, "Deployment")
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %v, want 2", d.Spec.Replicas)
	}
	if d.Name != "lull-controller" || d.Namespace != "ops" {
		t.Errorf("Deployment %s/%s, want ops/lull-controller", d.Namespace, d.Name)
	}
	c := controllerContainer(t, d)
	if c.Image != "ghcr.io/lull-dev/lull-controller:v0.1.0" {
		t.Errorf("image = %q, want ghcr.io/lull-dev/lull-controller:v0.1.0 (the chart's appVersion)", c.Image)
	}
	for _, arg := range []string{"--leader-elect=true", "--leader-election-namespace=ops", "--metrics-bind-address=:8080", "--health-probe-bind-address=:8081"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("args %q lack %s", c.Args, arg)
		}
	}
	if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--namespace") }) {
		t.Errorf("args %q restrict the controller to a namespace by default", c.Args)
	}

	pod := d.Spec.Template.Spec
	if pod.ServiceAccountName != only[corev1.ServiceAccount](t, objs, "ServiceAccount").Name {
		t.Errorf("serviceAccountName %q is not the chart's ServiceAccount", pod.ServiceAccountName)
	}
	psc, sc := pod.SecurityContext, c.SecurityContext
	if psc == nil || sc == nil {
		t.Fatalf("securityContext: pod %+v, container %+v; want both", psc, sc)
	}
	if !deref(psc.RunAsNonRoot) || !deref(sc.RunAsNonRoot) {
		t.Error("runAsNonRoot is not true on pod and container")
	}
	if deref(psc.RunAsUser) != 65532 || deref(sc.RunAsUser) != 65532 {
		t.Errorf("runAsUser pod %v container %v, want 65532 (the image's user)", psc.RunAsUser, sc.RunAsUser)
	}
	if !deref(sc.ReadOnlyRootFilesystem) {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
		t.Errorf("capabilities %+v, want drop [ALL] and nothing added", sc.Capabilities)
	}
	for what, sp := range map[string]*corev1.SeccompProfile{"pod": psc.SeccompProfile, "container": sc.SeccompProfile} {
		if sp == nil || sp.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s seccompProfile %+v, want RuntimeDefault", what, sp)
		}
	}

	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["metrics"] != 8080 || ports["health"] != 8081 {
		t.Errorf("container ports %v, want metrics 8080 and health 8081", ports)
	}
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		want := map[string]string{"liveness": "/healthz", "readiness": "/readyz"}[name]
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want || p.HTTPGet.Port.String() != "health" {
			t.Errorf("%s probe %+v, want GET %s on port health", name, p, want)
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v, want cpu and memory requests and a memory limit", c.Resources)
	}
	var gomemlimit *corev1.EnvVar
	for i := range c.Env {
		if c.Env[i].Name == "GOMEMLIMIT" {
			gomemlimit = &c.Env[i]
		}
	}
	if gomemlimit == nil || gomemlimit.ValueFrom == nil || gomemlimit.ValueFrom.ResourceFieldRef == nil ||
		gomemlimit.ValueFrom.ResourceFieldRef.Resource != "limits.memory" || gomemlimit.ValueFrom.ResourceFieldRef.ContainerName != c.Name {
		t.Errorf("GOMEMLIMIT = %+v, want the controller container's limits.memory through resourceFieldRef", gomemlimit)
	}

	svc := only[corev1.Service](t, objs, "Service")
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8080 || svc.Spec.Ports[0].TargetPort.String() != "metrics" {
		t.Errorf("metrics Service ports %+v, want 8080 to the container's metrics port", svc.Spec.Ports)
	}
	for k, v := range svc.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("metrics Service selects %s=%s, which the controller's pods do not carry", k, v)
		}
	}
	pdb := only[policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget")
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget minAvailable %v, want 1", pdb.Spec.MinAvailable)
	}
	if pdb.Spec.Selector == nil || !slices.Equal(sortedPairs(pdb.Spec.Selector.MatchLabels), sortedPairs(d.Spec.Selector.MatchLabels)) {
		t.Errorf("PodDisruptionBudget selects %v, want the Deployment's selector %v", pdb.Spec.Selector, d.Spec.Selector.MatchLabels)
	}
	if n := count(objs, "ServiceMonitor"); n != 0 {
		t.Errorf("%d ServiceMonitors rendered with serviceMonitor.enabled false", n)
	}
	if n := count(objs, "ConfigMap"); n != 0 {
		t.Errorf("%d ConfigMaps rendered with dashboard.enabled false", n)
	}
	if n := count(objs, "CustomResourceDefinition"); n != 3 {
		t.Errorf("%d CRDs rendered, want Session, SessionTemplate and RuntimeCatalog", n)
	}
}

// TestRenderEverythingOn: each optional value reaches the object it
// configures.
func TestRenderEverythingOn(t *testing.T) {
	objs := render(t, Options{Dir: chartWithDashboard(t), Values: everythingOn})
	d := only[appsv1.Deployment](t, objs, "Deployment")
	c := controllerContainer(t, d)
	pod := d.Spec.Template.Spec
	if want := "registry.example.com/lull-controller@sha256:" + strings.Repeat("ab", 32); c.Image != want {
		t.Errorf("image %q, want %q (the digest wins over the tag)", c.Image, want)
	}
	if c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("imagePullPolicy %q, want Always", c.ImagePullPolicy)
	}
	for _, arg := range []string{"--namespace=sessions", "--max-concurrent-reconciles=32"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("args %q lack %s", c.Args, arg)
		}
	}
	if len(pod.ImagePullSecrets) != 1 || pod.ImagePullSecrets[0].Name != "pull" {
		t.Errorf("imagePullSecrets %+v", pod.ImagePullSecrets)
	}
	if pod.NodeSelector["kubernetes.io/os"] != "linux" || len(pod.Tolerations) != 1 || pod.Affinity == nil || pod.Affinity.PodAntiAffinity == nil {
		t.Errorf("scheduling: nodeSelector %v, tolerations %v, affinity %+v", pod.NodeSelector, pod.Tolerations, pod.Affinity)
	}
	if pod.PriorityClassName != "system-cluster-critical" {
		t.Errorf("priorityClassName %q", pod.PriorityClassName)
	}
	if d.Spec.Template.Annotations["example.com/a"] != "b" || d.Spec.Template.Labels["team"] != "platform" {
		t.Errorf("pod annotations %v labels %v", d.Spec.Template.Annotations, d.Spec.Template.Labels)
	}
	if sa := only[corev1.ServiceAccount](t, objs, "ServiceAccount"); sa.Annotations["example.com/role"] != "lull" {
		t.Errorf("ServiceAccount annotations %v", sa.Annotations)
	}

	var sm *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "ServiceMonitor" {
			sm = o
		}
	}
	if sm == nil || sm.GetAPIVersion() != "monitoring.coreos.com/v1" {
		t.Fatalf("ServiceMonitor %v, want one of monitoring.coreos.com/v1", sm)
	}
	if sm.GetLabels()["release"] != "prometheus" {
		t.Errorf("ServiceMonitor labels %v lack serviceMonitor.labels", sm.GetLabels())
	}
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(endpoints) != 1 || endpoints[0].(map[string]any)["port"] != "metrics" || endpoints[0].(map[string]any)["interval"] != "15s" {
		t.Errorf("ServiceMonitor endpoints %v, want port metrics every 15s", endpoints)
	}
	svc := only[corev1.Service](t, objs, "Service")
	selector, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	for k, v := range selector {
		if svc.Labels[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s, which the metrics Service does not carry", k, v)
		}
	}

	cm := only[corev1.ConfigMap](t, objs, "ConfigMap")
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v, want grafana_dashboard: \"1\"", cm.Labels)
	}
	if got := cm.Data["lull.json"]; got != testDashboard {
		t.Errorf("dashboard ConfigMap data[lull.json] = %q, want the file as it is: %q", got, testDashboard)
	}
}

const testDashboard = `{"title": "lull", "panels": []}`

// chartWithDashboard copies the chart to a temporary directory with one
// dashboard, dashboards/lull.json, whatever the tree holds there.
func chartWithDashboard(t *testing.T) string {
	t.Helper()
	dir := copyChart(t)
	if err := os.RemoveAll(filepath.Join(dir, "dashboards")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "dashboards"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "dashboards", "lull.json"), []byte(testDashboard), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func copyChart(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "lull")
	if err := os.CopyFS(dir, os.DirFS(Dir())); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestDashboardWithoutDashboards: dashboard.enabled with no dashboard in
// the chart (the directory empty or absent) renders, and renders no
// ConfigMap.
func TestDashboardWithoutDashboards(t *testing.T) {
	for name, prepare := range map[string]func(dir string) error{
		"absent": func(dir string) error { return os.RemoveAll(filepath.Join(dir, "dashboards")) },
		"empty": func(dir string) error {
			if err := os.RemoveAll(filepath.Join(dir, "dashboards")); err != nil {
				return err
			}
			return os.Mkdir(filepath.Join(dir, "dashboards"), 0o755)
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := copyChart(t)
			if err := prepare(dir); err != nil {
				t.Fatal(err)
			}
			objs := render(t, Options{Dir: dir, Values: map[string]any{"dashboard": map[string]any{"enabled": true}}})
			if n := count(objs, "ConfigMap"); n != 0 {
				t.Errorf("%d ConfigMaps rendered with no dashboard, want none", n)
			}
		})
	}
}

// TestNoDisruptionBudgetThatBlocksDrains: with one replica a budget of
// minAvailable 1 would refuse every eviction, so none is rendered; and
// none when it is turned off.
func TestNoDisruptionBudgetThatBlocksDrains(t *testing.T) {
	for name, values := range map[string]map[string]any{
		"one replica": {"replicaCount": 1},
		"disabled":    {"podDisruptionBudget": map[string]any{"enabled": false}},
	} {
		t.Run(name, func(t *testing.T) {
			if n := count(render(t, Options{Values: values}), "PodDisruptionBudget"); n != 0 {
				t.Errorf("%d PodDisruptionBudgets rendered, want none", n)
			}
		})
	}
}

// TestValuesSchemaNamesTheField: a misspelt key or a wrong type is refused
// before anything renders, with an error that names the key.
func TestValuesSchemaNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   []string
	}{
		{"misspelt key", map[string]any{"serviceMonitor": map[string]any{"enable": true}}, []string{"serviceMonitor", "enable"}},
		{"unknown top-level key", map[string]any{"replicas": 3}, []string{"replicas"}},
		{"wrong type", map[string]any{"replicaCount": "two"}, []string{"replicaCount"}},
		{"zero replicas", map[string]any{"replicaCount": 0}, []string{"replicaCount"}},
		{"not a duration", map[string]any{"leaderElection": map[string]any{"leaseDuration": 15}}, []string{"leaseDuration"}},
		{"argument without dashes", map[string]any{"extraArgs": []any{"namespace=x"}}, []string{"extraArgs"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Render(Options{Values: tc.values})
			if err == nil {
				t.Fatalf("values %v rendered, want them refused", tc.values)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}

// TestRefusesKubernetesWithoutNativeSidecarsOrAdmissionPolicy: Chart.yaml's
// kubeVersion refuses 1.29 (no ValidatingAdmissionPolicy v1) and accepts
// 1.30.
func TestRefusesKubernetesWithoutNativeSidecarsOrAdmissionPolicy(t *testing.T) {
	if _, err := Render(Options{KubeVersion: "v1.29.9"}); err == nil || !strings.Contains(err.Error(), "kubeVersion") {
		t.Errorf("render for Kubernetes v1.29.9: %v, want refused for the chart's kubeVersion", err)
	}
	if _, err := Render(Options{KubeVersion: "v1.30.0"}); err != nil {
		t.Errorf("render for Kubernetes v1.30.0: %v", err)
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func sortedPairs(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}
