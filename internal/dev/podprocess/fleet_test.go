package podprocess

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/testenv"
)

// fleetEnv runs pods' runtimes in fleet mode with prog, each given the
// arguments --pod=<pod name>, over a fake clientset.
func fleetEnv(t *testing.T, prog Program, pods ...*corev1.Pod) *testEnv {
	t.Helper()
	e := newTestEnvWith(t, Options{
		Mode: ModeFleet,
		Program: func(pod *corev1.Pod, _ *corev1.Container) (Program, []string) {
			return prog, []string{"--pod=" + pod.Name}
		},
		Command: func(*corev1.Pod, *corev1.Container) (string, []string) {
			t.Error("fleet mode ran the runtime container as a process")
			return "/bin/false", nil
		},
	}, pods)
	return e
}

type fakeRoundTripper struct{}

func (fakeRoundTripper) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errors.New("not for this test")
}

// getenv returns the value of key in a "KEY=value" list.
func getenv(env []string, key string) string {
	return envOf(strings.Join(env, "\n"), "\n")[key]
}

// A fleet runtime is given what its process would be: the pod's args and
// env (downward API resolved), a kubeconfig with the pod-bound token, its
// journal and its log; and the fleet's one transport.
func TestFleetRuntimeGetsWhatItsProcessWould(t *testing.T) {
	got := make(chan Invocation, 2)
	prog := func(ctx context.Context, inv Invocation) error {
		fmt.Fprintln(inv.Output, "hello from", getenv(inv.Env, lullv1.EnvPodUID))
		got <- inv
		<-ctx.Done()
		return nil
	}
	pod := runningPod("s-0", "uid-1")
	pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: lullv1.EnvPodUID, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}}}
	shared := fakeRoundTripper{}
	dir := t.TempDir()
	e := newTestEnvWith(t, Options{
		Mode: ModeFleet,
		Program: func(pod *corev1.Pod, _ *corev1.Container) (Program, []string) {
			return prog, []string{"--pod=" + pod.Name, "--dir=" + dir}
		},
	}, nil)
	e.r.transport = shared
	if _, err := e.cs.CoreV1().Pods("ns").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var inv Invocation
	select {
	case inv = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the runtime did not start")
	}
	if !slices.Equal(inv.Args, []string{"--pod=s-0", "--dir=" + dir}) {
		t.Errorf("args %q", inv.Args)
	}
	if v := getenv(inv.Env, lullv1.EnvPodUID); v != "uid-1" {
		t.Errorf("%s=%q, want the pod's UID", lullv1.EnvPodUID, v)
	}
	if v := getenv(inv.Env, EnvJournal); v != filepath.Join(e.dir, "journals", "ns_s-0_uid-1.jsonl") {
		t.Errorf("%s=%q, want the process path's journal", EnvJournal, v)
	}
	kc, err := os.ReadFile(getenv(inv.Env, "KUBECONFIG"))
	if err != nil || !strings.Contains(string(kc), "token: token") {
		t.Errorf("KUBECONFIG: %v\n%s", err, kc)
	}
	if inv.Transport != shared {
		t.Errorf("transport %v, want the fleet's", inv.Transport)
	}
	eventually(t, 10*time.Second, "the runtime's output in its pod's log", func() error {
		b, _ := os.ReadFile(filepath.Join(e.dir, "logs", "ns_s-0_uid-1.log"))
		if !strings.Contains(string(b), "hello from uid-1") {
			return fmt.Errorf("log %q", b)
		}
		return nil
	})
}

// A fleet runtime that returns while its pod runs is a crashed container:
// CrashLoopBackOff with its error, exit code 1, then a restart; a panic is
// exit code 2 and does not take the fleet down.
func TestFleetRuntimeThatReturnsIsRestarted(t *testing.T) {
	var runs atomic.Int32
	prog := func(ctx context.Context, _ Invocation) error {
		switch runs.Add(1) {
		case 1:
			return errors.New("unknown flag: --model")
		case 2:
			panic("nil map")
		}
		<-ctx.Done()
		return nil
	}
	e := fleetEnv(t, prog, runningPod("s-0", "uid-1"))
	p := waitPod(t, e.cs, "s-0", "CrashLoopBackOff reported", func(p *corev1.Pod) error {
		c := p.Status.ContainerStatuses[0]
		if w := c.State.Waiting; w == nil || w.Reason != "CrashLoopBackOff" {
			return fmt.Errorf("container state %+v", c.State)
		}
		return nil
	})
	c := p.Status.ContainerStatuses[0]
	if !strings.Contains(c.State.Waiting.Message, "unknown flag: --model") || c.Ready || c.RestartCount != 1 {
		t.Errorf("crashed container %+v", c)
	}
	if term := c.LastTerminationState.Terminated; term == nil || term.ExitCode != 1 {
		t.Errorf("last termination %+v, want exit code 1", c.LastTerminationState)
	}
	waitPod(t, e.cs, "s-0", "the panic reported", func(p *corev1.Pod) error {
		c := p.Status.ContainerStatuses[0]
		if term := c.LastTerminationState.Terminated; c.RestartCount != 2 || term == nil || term.ExitCode != 2 {
			return fmt.Errorf("container %+v", c)
		}
		return nil
	})
	waitPod(t, e.cs, "s-0", "restarted runtime running", func(p *corev1.Pod) error {
		if c := p.Status.ContainerStatuses[0]; c.State.Running == nil || !c.Ready {
			return fmt.Errorf("container %+v", c)
		}
		return nil
	})
	if n := runs.Load(); n != 3 {
		t.Errorf("%d runs, want 3", n)
	}
}

// Deleting a pod cancels its runtime's context and waits for it to
// return before the pod is finalized; a runtime that does not return
// within the grace period is abandoned and the pod is finalized anyway.
func TestFleetStopCancelsAndWaits(t *testing.T) {
	var mu sync.Mutex
	returned := map[string]time.Time{}
	prog := func(ctx context.Context, inv Invocation) error {
		<-ctx.Done()
		pod := strings.TrimPrefix(inv.Args[0], "--pod=")
		if pod == "stuck" {
			select {} // never returns
		}
		time.Sleep(200 * time.Millisecond) // finishes its work
		mu.Lock()
		returned[pod] = time.Now()
		mu.Unlock()
		return nil
	}
	e := fleetEnv(t, prog, runningPod("polite", "uid-1"), runningPod("stuck", "uid-2"))
	eventually(t, 10*time.Second, "both runtimes started", func() error {
		if n := strings.Count(e.log.String(), "started in this process"); n != 2 {
			return fmt.Errorf("%d started", n)
		}
		return nil
	})
	for _, name := range []string{"polite", "stuck"} {
		p, err := e.cs.CoreV1().Pods("ns").Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.DeletionTimestamp = ptrTime(metav1.Now())
		if _, err := e.cs.CoreV1().Pods("ns").Update(t.Context(), p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	finalized := map[string]time.Time{}
	eventually(t, 10*time.Second, "both pods finalized", func() error {
		for _, name := range []string{"polite", "stuck"} {
			if _, ok := finalized[name]; ok {
				continue
			}
			if _, err := e.cs.CoreV1().Pods("ns").Get(t.Context(), name, metav1.GetOptions{}); err == nil {
				return fmt.Errorf("pod %s still there", name)
			}
			finalized[name] = time.Now()
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if r, ok := returned["polite"]; !ok || r.After(finalized["polite"]) {
		t.Errorf("pod polite finalized at %v, its runtime returned at %v (ok %v): want the runtime gone first", finalized["polite"], r, ok)
	}
	if !strings.Contains(e.log.String(), "pod ns/stuck (uid-2): container runtime did not return within the grace period of 1s") {
		t.Errorf("the abandoned runtime is not logged:\n%s", e.log.String())
	}
}

func TestModeFlagValue(t *testing.T) {
	var m Mode
	if m.String() != "process" {
		t.Errorf("zero Mode is %q, want process", m)
	}
	if err := m.Set("fleet"); err != nil || m != ModeFleet {
		t.Errorf("Set(fleet): %v, %q", err, m)
	}
	if err := m.Set("threads"); err == nil || !strings.Contains(err.Error(), "want process") {
		t.Errorf("Set(threads) = %v", err)
	}
	if _, err := New(Options{Mode: ModeFleet, Dir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "Options.Program") {
		t.Errorf("New in ModeFleet without a Program = %v", err)
	}
}

// eventually is testenv.Eventually; these tests wait at most 10 s.
var eventually = testenv.Eventually
