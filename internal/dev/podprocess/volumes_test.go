package podprocess

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

func TestRewritePaths(t *testing.T) {
	ws := []mount{{path: "/workspace", host: "/h/pv"}}
	nested := []mount{{path: "/data", host: "/h/data"}, {path: "/data/cache", host: "/h/cache"}}
	sock := []mount{{path: "/run/lull", host: "/h/sock"}}
	for _, tc := range []struct {
		in     string
		mounts []mount
		want   string
	}{
		{"/workspace", ws, "/h/pv"},
		{"/workspace/", ws, "/h/pv/"},
		{"/workspace/src/main.go", ws, "/h/pv/src/main.go"},
		{"--dir=/workspace/src", ws, "--dir=/h/pv/src"},
		{"--dir /workspace", ws, "--dir /h/pv"},
		{"/a:/workspace/bin:/usr/bin", ws, "/a:/h/pv/bin:/usr/bin"},
		{"/workspace/a,/workspace/b", ws, "/h/pv/a,/h/pv/b"},
		{`{"root":"/workspace"}`, ws, `{"root":"/h/pv"}`},
		{"file:///workspace/x", ws, "file:///h/pv/x"},
		// Not the mount path: another name, or the same name elsewhere.
		{"/workspace2", ws, "/workspace2"},
		{"/workspace.old/x", ws, "/workspace.old/x"},
		{"/workspace-b", ws, "/workspace-b"},
		{"/srv/workspace", ws, "/srv/workspace"},
		{"workspace/x", ws, "workspace/x"},
		{"x/workspace", ws, "x/workspace"},
		{"", ws, ""},
		{"/workspace", nil, "/workspace"},
		// Nested mounts: the longest wins.
		{"/data/cache/x", nested, "/h/cache/x"},
		{"/data/cachex", nested, "/h/data/cachex"},
		{"/data/x", nested, "/h/data/x"},
		// A unix socket URL.
		{"--listen=unix:///run/lull/agent.sock", sock, "--listen=unix:///h/sock/agent.sock"},
		{"unix:///run/lull/agent.sock", sock, "unix:///h/sock/agent.sock"},
		{"unix:///run/lullaby", sock, "unix:///run/lullaby"},
		// What is written in is not rewritten again.
		{"/workspace", []mount{{path: "/workspace", host: "/workspace/host"}}, "/workspace/host"},
	} {
		if got := rewritePaths(tc.in, tc.mounts); got != tc.want {
			t.Errorf("rewritePaths(%q, %v) = %q, want %q", tc.in, tc.mounts, got, tc.want)
		}
	}
}

func TestMountsOf(t *testing.T) {
	dirs := map[string]string{"data": "/h/pv", "scratch": "/h/empty"}
	env := map[string]string{"POD": "s-0"}
	for _, tc := range []struct {
		name    string
		mounts  []corev1.VolumeMount
		want    []mount
		wantErr string
	}{
		{"plain", []corev1.VolumeMount{{Name: "data", MountPath: "/workspace/"}}, []mount{{"/workspace", "/h/pv"}}, ""},
		{"subPath", []corev1.VolumeMount{{Name: "data", MountPath: "/cache", SubPath: "cache/app"}}, []mount{{"/cache", "/h/pv/cache/app"}}, ""},
		{"subPathExpr", []corev1.VolumeMount{{Name: "data", MountPath: "/home", SubPathExpr: "homes/$(POD)"}}, []mount{{"/home", "/h/pv/homes/s-0"}}, ""},
		{"unmapped volume kinds", []corev1.VolumeMount{{Name: "token", MountPath: "/var/run/secrets"}, {Name: "scratch", MountPath: "/tmp"}}, []mount{{"/tmp", "/h/empty"}}, ""},
		{"root", []corev1.VolumeMount{{Name: "data", MountPath: "/"}}, nil, ""},
		{"subPath leaving the volume", []corev1.VolumeMount{{Name: "data", MountPath: "/x", SubPath: "../etc"}}, nil, "must be a relative path inside the volume"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := mountsOf(&corev1.Container{Name: "runtime", VolumeMounts: tc.mounts}, dirs, env)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// claimPod is a running pod whose runtime mounts claim at /workspace, and
// a subdirectory of it at /var/cache/app.
func claimPod(claim string) *corev1.Pod {
	pod := runningPod("s-0", "uid-1")
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
	}}}
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/workspace"}, {Name: "data", MountPath: "/var/cache/app", SubPath: "cache"}}
	c.Env = []corev1.EnvVar{{Name: "WORKSPACE", Value: "/workspace"}}
	c.Args = []string{"--dir=/workspace/src", "--other=/workspace2", "--cache", "/var/cache/app"}
	return pod
}

// claimCommand runs claimPod's runtime: it writes its args and env into
// $WORKSPACE.
func claimCommand(_ *corev1.Pod, c *corev1.Container) (string, []string) {
	script := `printf '%s\n' "$@" > "$WORKSPACE/args"; env > "$WORKSPACE/env"; exec sleep 60`
	return "/bin/sh", append([]string{"-c", script, "sh"}, c.Args...)
}

func boundClaim(name, volume string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: volume},
		Status:     corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound},
	}
}

func hostPathVolume(name, path string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: path},
		}},
	}
}

// waitFile waits until path exists and returns its content.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not written", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A claim's mount path is its PersistentVolume's host directory: the
// runtime's args and env say so, a subPath is a directory in it, and
// LULL_DEV_MOUNTS lists both mounts.
func TestClaimIsMountedAtItsVolumesDirectory(t *testing.T) {
	pv := filepath.Join(t.TempDir(), "pv")
	if err := os.Mkdir(pv, 0o755); err != nil {
		t.Fatal(err)
	}
	newTestEnv(t, claimCommand, []*corev1.Pod{claimPod("data-s-0")}, boundClaim("data-s-0", "pv-1"), hostPathVolume("pv-1", pv))

	args := strings.Fields(waitFile(t, filepath.Join(pv, "args")))
	want := []string{"--dir=" + pv + "/src", "--other=/workspace2", "--cache", pv + "/cache"}
	if !slices.Equal(args, want) {
		t.Errorf("args %q, want %q", args, want)
	}
	if fi, err := os.Stat(filepath.Join(pv, "cache")); err != nil || !fi.IsDir() {
		t.Errorf("subPath directory: %v", err)
	}
	env := waitFile(t, filepath.Join(pv, "env"))
	for _, line := range []string{
		"WORKSPACE=" + pv + "\n",
		EnvDevMounts + "=/workspace=" + pv + "\n/var/cache/app=" + pv + "/cache\n",
		"KUBECONFIG=", // automountServiceAccountToken unset: a token
	} {
		if !strings.Contains(env, line) {
			t.Errorf("env lacks %q:\n%s", line, env)
		}
	}
}

// A pod whose claim is not bound yet is started once it is, by the retry:
// the pod itself does not change, so no update of it brings another try.
func TestUnboundClaimIsRetried(t *testing.T) {
	pv := filepath.Join(t.TempDir(), "pv")
	if err := os.Mkdir(pv, 0o755); err != nil {
		t.Fatal(err)
	}
	pending := boundClaim("data-s-0", "")
	pending.Status.Phase = corev1.ClaimPending
	e := newTestEnv(t, claimCommand, []*corev1.Pod{claimPod("data-s-0")}, pending)

	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(e.log.String(), `persistentvolumeclaim ns/data-s-0 is not bound yet (phase "Pending")`) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line about the unbound claim:\n%s", e.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(pv, "args")); err == nil {
		t.Fatal("runtime started before its claim was bound")
	}

	if _, err := e.cs.CoreV1().PersistentVolumes().Create(t.Context(), hostPathVolume("pv-1", pv), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cs.CoreV1().PersistentVolumeClaims("ns").UpdateStatus(t.Context(), boundClaim("data-s-0", "pv-1"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if args := waitFile(t, filepath.Join(pv, "args")); !strings.Contains(args, "--dir="+pv+"/src") {
		t.Errorf("args %q", args)
	}
}

func TestSeesToken(t *testing.T) {
	projected := corev1.Volume{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}},
	}}}
	configMap := corev1.Volume{Name: "config", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ConfigMap: &corev1.ConfigMapProjection{}}},
	}}}
	for _, tc := range []struct {
		name      string
		automount *bool
		mounts    []string
		want      bool
	}{
		{"automount unset", nil, nil, true},
		{"automount true", ptr.To(true), nil, true},
		{"automount false", ptr.To(false), nil, false},
		{"automount false, projected token mounted", ptr.To(false), []string{"token"}, true},
		{"automount false, projected configMap only", ptr.To(false), []string{"config"}, false},
	} {
		pod := &corev1.Pod{Spec: corev1.PodSpec{AutomountServiceAccountToken: tc.automount, Volumes: []corev1.Volume{projected, configMap}}}
		c := &corev1.Container{Name: "c"}
		for _, m := range tc.mounts {
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: m, MountPath: "/m/" + m})
		}
		if got := seesToken(pod, c); got != tc.want {
			t.Errorf("%s: seesToken = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A configMap volume (a template's spec.files) is a host directory holding
// the ConfigMap's keys as files, text and binary; a mount of it is mapped
// like an emptyDir's.
func TestConfigMapVolumeIsWrittenToItsDirectory(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "tpl-files-0123456789ab"},
		Data: map[string]string{"config.yaml": "model: big\n"}, BinaryData: map[string][]byte{"key.der": {0xff, 0, 0xfe}}}
	r := newRunner(Options{Dir: t.TempDir()}, fake.NewClientset(cm))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s-0", UID: "uid-1"},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: lullv1.FilesVolume, VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}}}}}}
	dirs, err := r.podVolumes(t.Context(), pod)
	if err != nil {
		t.Fatal(err)
	}
	dir := dirs[lullv1.FilesVolume]
	for name, want := range map[string]string{"config.yaml": "model: big\n", "key.der": "\xff\x00\xfe"} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q", name, got, err, want)
		}
	}

	pod.Spec.Volumes[0].ConfigMap.Name = "missing"
	if _, err := r.podVolumes(t.Context(), pod); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("a missing ConfigMap: %v, want an error naming it", err)
	}
}
