package podprocess

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/agent"
)

// agentHelper, as the first argument of the test binary, makes it stand in
// for `lull agent` (see runAgentHelper): sh cannot listen on a socket.
const agentHelper = "podprocess-test-agent"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == agentHelper {
		// Not os.Exit: under -race it waits a second before exiting,
		// longer than the runner's grace period in these tests.
		syscall.Exit(runAgentHelper(os.Args[2], os.Args[3], os.Args[4:]))
	}
	os.Exit(m.Run())
}

// runAgentHelper stands in for the agent: after a moment (so a runtime
// started without waiting for it would not find its socket) it appends
// "agent listening" to the events file and listens on its --listen socket,
// writes {} to its --state-file and its environment to events+".agent-env"
// (NUL-separated).
// On SIGTERM it appends "agent stopped" and whether the runtime had
// stopped. With mode "crash-once", its first run exits with status 2 once
// the runtime has started; with mode "silent" it never listens.
func runAgentHelper(events, mode string, args []string) int {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	time.Sleep(300 * time.Millisecond)
	runs := strings.Count(readFile(events), "agent listening")
	appendLine(events, "agent listening")
	if mode != "silent" {
		network, addr := listenAddress(args)
		_ = os.Remove(addr) // the socket of an earlier run
		ln, err := net.Listen(network, addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	for _, a := range args {
		if f, ok := strings.CutPrefix(a, "--state-file="); ok {
			if err := os.WriteFile(f, []byte("{}"), 0o644); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
	}
	if err := os.WriteFile(events+".agent-env", []byte(strings.Join(os.Environ(), "\x00")), 0o644); err != nil {
		return 1
	}
	for {
		select {
		case <-term:
			if strings.Contains(readFile(events), "runtime stopped") {
				appendLine(events, "agent stopped after the runtime")
			} else {
				appendLine(events, "agent stopped while the runtime ran")
			}
			return 0
		case <-time.After(20 * time.Millisecond):
			if mode == "crash-once" && runs == 0 && strings.Contains(readFile(events), "runtime started") {
				fmt.Fprintln(os.Stderr, "agent: crashing on purpose")
				return 2
			}
		}
	}
}

// runtimeScript stands in for a runtime that uses the agent: it writes its
// environment to $1.runtime-env, notes whether the agent's socket is there,
// and appends "runtime started", and "runtime stopped" on SIGTERM, to $1.
const runtimeScript = `trap 'echo runtime stopped >> "$1"; exit 0' TERM
env > "$1.runtime-env"
if [ -S "$LULL_AGENT_SOCKET" ]; then echo runtime sees the socket >> "$1"; fi
echo runtime started >> "$1"
sleep 60 & wait`

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

func appendLine(path, line string) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintln(f, line)
}

// sidecarPod is a running session pod with the injected agent sidecar, as
// the session controller renders it.
func sidecarPod(name string, uid types.UID) *corev1.Pod {
	pod := runningPod(name, uid)
	pod.Spec.AutomountServiceAccountToken = ptr.To(false)
	fieldEnv := func(name, field string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: field}}}
	}
	pod.Spec.InitContainers = []corev1.Container{{
		Name:          lullv1.AgentContainerName,
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Command:       []string{"lull", "agent"},
		Args:          []string{"--listen=unix://" + lullv1.AgentSocketPath, "--state-file=" + lullv1.AgentStateFile},
		Env: []corev1.EnvVar{
			{Name: lullv1.EnvSessionName, Value: name}, {Name: lullv1.EnvSessionNamespace, Value: "ns"},
			fieldEnv(lullv1.EnvPodName, "metadata.name"), fieldEnv(lullv1.EnvPodUID, "metadata.uid"),
		},
		VolumeMounts: []corev1.VolumeMount{
			{Name: lullv1.AgentSocketVolume, MountPath: lullv1.AgentSocketDir},
			{Name: lullv1.AgentStateVolume, MountPath: lullv1.AgentStateDir},
			{Name: lullv1.AgentTokenVolume, MountPath: lullv1.AgentTokenDir, ReadOnly: true},
		},
	}}
	rt := &pod.Spec.Containers[0]
	rt.Env = []corev1.EnvVar{{Name: lullv1.EnvAgentSocket, Value: lullv1.AgentSocketPath}}
	rt.VolumeMounts = []corev1.VolumeMount{{Name: lullv1.AgentSocketVolume, MountPath: lullv1.AgentSocketDir}}
	emptyDir := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
	pod.Spec.Volumes = []corev1.Volume{
		{Name: lullv1.AgentSocketVolume, VolumeSource: emptyDir},
		{Name: lullv1.AgentStateVolume, VolumeSource: emptyDir},
		{Name: lullv1.AgentTokenVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
		}}}},
	}
	return pod
}

// sidecarEnv runs sidecarPod s-0 (UID uid-1) with the agent helper in mode
// and runtimeScript; events is the file both append to.
func sidecarEnv(t *testing.T, mode string) (e *testEnv, events string) {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	events = filepath.Join(t.TempDir(), "events")
	e = newTestEnv(t, func(_ *corev1.Pod, c *corev1.Container) (string, []string) {
		if c.Name == lullv1.AgentContainerName {
			return bin, append([]string{agentHelper, events, mode}, c.Args...)
		}
		return "/bin/sh", []string{"-c", runtimeScript, "sh", events}
	}, []*corev1.Pod{sidecarPod("s-0", "uid-1")})
	return e, events
}

// waitEvent waits until the events file holds line n times.
func waitEvent(t *testing.T, events, line string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(readFile(events), line) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%q not seen %d times; events:\n%s", line, n, readFile(events))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// envOf parses an environment listed one variable per sep.
func envOf(text, sep string) map[string]string {
	env := map[string]string{}
	for _, l := range strings.Split(text, sep) {
		if k, v, ok := strings.Cut(l, "="); ok {
			env[k] = v
		}
	}
	return env
}

// The agent sidecar starts first and the runtime once the agent listens;
// both see the same emptyDir at /run/lull; only the agent has a token. On
// deletion the runtime stops first, then the agent, and the emptyDirs are
// removed.
func TestAgentStartsFirstAndStopsLast(t *testing.T) {
	e, events := sidecarEnv(t, "")
	waitEvent(t, events, "runtime started", 1)
	lines := strings.Split(strings.TrimSpace(readFile(events)), "\n")
	if want := []string{"agent listening", "runtime sees the socket", "runtime started"}; !slices.Equal(lines, want) {
		t.Errorf("events %q, want %q", lines, want)
	}

	vols := e.r.volumeDir("uid-1")
	socketDir := filepath.Join(vols, lullv1.AgentSocketVolume)
	agentEnv, runtimeEnv := envOf(waitFile(t, events+".agent-env"), "\x00"), envOf(waitFile(t, events+".runtime-env"), "\n")
	if got, want := runtimeEnv[lullv1.EnvAgentSocket], filepath.Join(socketDir, "agent.sock"); got != want {
		t.Errorf("runtime %s=%q, want %q", lullv1.EnvAgentSocket, got, want)
	}
	if got, want := runtimeEnv[EnvDevMounts], lullv1.AgentSocketDir+"="+socketDir; got != want {
		t.Errorf("runtime %s=%q, want %q", EnvDevMounts, got, want)
	}
	stateDir := filepath.Join(vols, lullv1.AgentStateVolume)
	if got, want := agentEnv[EnvDevMounts], lullv1.AgentSocketDir+"="+socketDir+"\n"+lullv1.AgentStateDir+"="+stateDir; got != want {
		t.Errorf("agent %s=%q, want %q", EnvDevMounts, got, want)
	}
	if b, err := os.ReadFile(filepath.Join(stateDir, "turns.json")); err != nil || string(b) != "{}" {
		t.Errorf("agent state file in its emptyDir: %q, %v", b, err)
	}
	if kc, ok := runtimeEnv["KUBECONFIG"]; ok {
		t.Errorf("runtime has KUBECONFIG=%s under automountServiceAccountToken false", kc)
	}
	if _, err := os.Stat(agentEnv["KUBECONFIG"]); err != nil {
		t.Errorf("agent's KUBECONFIG %q: %v", agentEnv["KUBECONFIG"], err)
	}
	if agentEnv[lullv1.EnvPodUID] != "uid-1" || agentEnv[lullv1.EnvPodName] != "s-0" {
		t.Errorf("agent pod env: %s=%q %s=%q", lullv1.EnvPodName, agentEnv[lullv1.EnvPodName], lullv1.EnvPodUID, agentEnv[lullv1.EnvPodUID])
	}

	p, _ := e.cs.CoreV1().Pods("ns").Get(t.Context(), "s-0", metav1.GetOptions{})
	p.DeletionTimestamp = ptrTime(metav1.Now())
	if _, err := e.cs.CoreV1().Pods("ns").Update(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, events, "agent stopped", 1)
	if !strings.Contains(readFile(events), "runtime stopped\nagent stopped after the runtime\n") {
		t.Errorf("stop order; events:\n%s", readFile(events))
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := os.Stat(vols)
		if os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("emptyDir volumes of the finalized pod remain: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// An agent that exits on its own is restarted after the back-off while the
// runtime goes on; the runtime container's status is not touched.
func TestAgentCrashIsRestarted(t *testing.T) {
	e, events := sidecarEnv(t, "crash-once")
	waitEvent(t, events, "agent listening", 2)
	time.Sleep(300 * time.Millisecond)
	if n := strings.Count(readFile(events), "runtime started"); n != 1 {
		t.Errorf("runtime started %d times, want once", n)
	}
	if strings.Contains(readFile(events), "runtime stopped") {
		t.Error("runtime stopped when the agent crashed")
	}
	p, _ := e.cs.CoreV1().Pods("ns").Get(t.Context(), "s-0", metav1.GetOptions{})
	if c := p.Status.ContainerStatuses[0]; !c.Ready || c.RestartCount != 0 || c.State.Running == nil {
		t.Errorf("runtime container status changed: %+v", c)
	}
	if !strings.Contains(e.log.String(), "container lull-agent crashed (exit status 2); restart 1 in 200ms") {
		t.Errorf("no log line about the agent's restart:\n%s", e.log.String())
	}
}

// An agent that does not listen within the bound fails the start: it is
// stopped, the runtime is not started, and the start is retried.
func TestSilentAgentFailsTheStart(t *testing.T) {
	defer func(d time.Duration) { testListenWait = d }(testListenWait)
	testListenWait = time.Second
	e, events := sidecarEnv(t, "silent")
	waitEvent(t, events, "agent listening", 2) // started again
	if want := "agent sidecar not listening on " + filepath.Join(e.r.volumeDir("uid-1"), lullv1.AgentSocketVolume, "agent.sock") + " after 1s"; !strings.Contains(e.log.String(), want) {
		t.Errorf("log lacks %q:\n%s", want, e.log.String())
	}
	if text := readFile(events); strings.Contains(text, "runtime started") || !strings.Contains(text, "agent stopped while the runtime ran") {
		t.Errorf("events:\n%s", text)
	}
}

func TestListenAddress(t *testing.T) {
	for _, tc := range []struct {
		args          []string
		network, addr string
	}{
		{[]string{"--listen=unix:///h/sock/agent.sock", "--state-file=/x"}, "unix", "/h/sock/agent.sock"},
		{[]string{"--listen", "unix:///h/agent.sock"}, "unix", "/h/agent.sock"},
		{[]string{"--listen=127.0.0.1:9000"}, "tcp", "127.0.0.1:9000"},
		{nil, "tcp", agent.DefaultListen},
	} {
		if network, addr := listenAddress(tc.args); network != tc.network || addr != tc.addr {
			t.Errorf("listenAddress(%q) = %s %s, want %s %s", tc.args, network, addr, tc.network, tc.addr)
		}
	}
}
