package podprocess

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	k8stesting "k8s.io/client-go/testing"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// runningPod is a session pod as KWOK leaves it: Running, its container
// running and ready.
func runningPod(name string, uid types.UID) *corev1.Pod {
	now := metav1.Now()
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: uid, Labels: map[string]string{lullv1.LabelSession: name}},
		Spec: corev1.PodSpec{
			ServiceAccountName: "runtime",
			Containers:         []corev1.Container{{Name: "runtime", Image: "example.invalid/runtime:v1"}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			},
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: "runtime", Image: "example.invalid/runtime:v1", Ready: true,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			}},
		},
	}
}

// testRunner runs each pod's runtime as `sh -c script`, the script
// being given the pod's name as $1, with back-offs of a few milliseconds.
func testRunner(t *testing.T, script string, pods ...*corev1.Pod) (*Runner, *fake.Clientset, string) {
	t.Helper()
	e := newTestEnv(t, func(pod *corev1.Pod, _ *corev1.Container) (string, []string) {
		return "/bin/sh", []string{"-c", script, "sh", pod.Name}
	}, pods)
	return e.r, e.cs, e.dir
}

// testEnv is a running Runner over a fake clientset, and its log.
type testEnv struct {
	r   *Runner
	cs  *fake.Clientset
	dir string
	log *testLog
}

// newTestEnv starts a runner that runs containers with command, over a
// fake clientset holding pods and objs, with back-offs of a few
// milliseconds and a 1 s wait for an agent sidecar to listen. The fake grants any token request.
func newTestEnv(t *testing.T, command func(*corev1.Pod, *corev1.Container) (string, []string), pods []*corev1.Pod, objs ...runtime.Object) *testEnv {
	t.Helper()
	return newTestEnvWith(t, Options{Command: command}, pods, objs...)
}

// newTestEnvWith is newTestEnv with opts (its Command, Mode and Program;
// the rest is the test's).
func newTestEnvWith(t *testing.T, opts Options, pods []*corev1.Pod, objs ...runtime.Object) *testEnv {
	t.Helper()
	return newTestEnvWrapped(t, opts, nil, pods, objs...)
}

// newTestEnvWrapped is newTestEnvWith whose runner talks to wrap(the fake
// clientset); nil wrap means the fake itself.
func newTestEnvWrapped(t *testing.T, opts Options, wrap func(*fake.Clientset) kubernetes.Interface, pods []*corev1.Pod, objs ...runtime.Object) *testEnv {
	t.Helper()
	dir := t.TempDir()
	cs := fake.NewClientset(objs...)
	// The fake cannot create tokens; any token will do.
	cs.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		return true, &authenticationv1.TokenRequest{Status: authenticationv1.TokenRequestStatus{Token: "token"}}, nil
	})
	for _, p := range pods {
		if _, err := cs.CoreV1().Pods(p.Namespace).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"kubeconfig", "logs", "journals", "volumes"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	log := &testLog{t: t}
	opts.Server, opts.Dir, opts.GracePeriod, opts.Log = "https://127.0.0.1:1", dir, time.Second, log
	var client kubernetes.Interface = cs
	if wrap != nil {
		client = wrap(cs)
	}
	r := newRunner(opts, client)
	r.backoff, r.backoffMax, r.upAfter, r.listenWait = 200*time.Millisecond, 400*time.Millisecond, 300*time.Millisecond, testListenWait
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return &testEnv{r: r, cs: cs, dir: dir, log: log}
}

// testListenWait is the test runner's bound on an agent sidecar's start:
// long enough for the test binary re-executed as the agent to listen on a
// loaded 2-core machine (a second was not), short enough for a test of an
// agent that never listens (TestSilentAgentFailsTheStart shortens it).
var testListenWait = 5 * time.Second

// testLog passes the runner's log to the test's and keeps it.
type testLog struct {
	t    *testing.T
	mu   sync.Mutex
	text strings.Builder
}

func (l *testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.text.Write(p)
}

func (l *testLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.text.String()
}

func waitPod(t *testing.T, cs *fake.Clientset, name, what string, cond func(*corev1.Pod) error) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, err := cs.CoreV1().Pods("ns").Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			if err = cond(p); err == nil {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func condition(p *corev1.Pod, typ corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

func runs(t *testing.T, path string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), "\n")
}

// A runtime that exits on its own shows CrashLoopBackOff, not ready, with
// its exit status and last log line, and is restarted after the back-off;
// once up again its container is running and ready.
func TestCrashedRuntimeIsReportedAndRestarted(t *testing.T) {
	dir := t.TempDir()
	count := filepath.Join(dir, "runs")
	// First run: fail at once. Later runs: stay up.
	script := fmt.Sprintf(`echo run >> %[1]s; if [ "$(wc -l < %[1]s)" -gt 1 ]; then exec sleep 60; fi; echo "starting"; echo "Error: unknown flag: --model" >&2; exit 3`, count)
	_, cs, _ := testRunner(t, script, runningPod("s-0", "uid-1"))

	p := waitPod(t, cs, "s-0", "CrashLoopBackOff reported", func(p *corev1.Pod) error {
		if w := p.Status.ContainerStatuses[0].State.Waiting; w == nil || w.Reason != "CrashLoopBackOff" {
			return fmt.Errorf("container state %+v", p.Status.ContainerStatuses[0].State)
		}
		return nil
	})
	c := p.Status.ContainerStatuses[0]
	t.Logf("crashed: %s", c.State.Waiting.Message)
	for _, want := range []string{"exit status 3", "Error: unknown flag: --model", "back-off 200ms"} {
		if !strings.Contains(c.State.Waiting.Message, want) {
			t.Errorf("waiting message %q lacks %q", c.State.Waiting.Message, want)
		}
	}
	if c.Ready || c.RestartCount != 1 {
		t.Errorf("ready %v restartCount %d, want false 1", c.Ready, c.RestartCount)
	}
	if term := c.LastTerminationState.Terminated; term == nil || term.ExitCode != 3 || term.Reason != "Error" {
		t.Errorf("last termination %+v", c.LastTerminationState)
	}
	if condition(p, corev1.PodReady) != corev1.ConditionFalse || condition(p, corev1.ContainersReady) != corev1.ConditionFalse {
		t.Errorf("conditions %+v", p.Status.Conditions)
	}
	if p.Status.Phase != corev1.PodRunning || condition(p, corev1.PodInitialized) != corev1.ConditionTrue {
		t.Errorf("phase %s, conditions %+v: the rest of the status must stay", p.Status.Phase, p.Status.Conditions)
	}

	p = waitPod(t, cs, "s-0", "restarted runtime reported running", func(p *corev1.Pod) error {
		c := p.Status.ContainerStatuses[0]
		if c.State.Running == nil || !c.Ready || condition(p, corev1.PodReady) != corev1.ConditionTrue || condition(p, corev1.ContainersReady) != corev1.ConditionTrue {
			return fmt.Errorf("container %+v, conditions %+v", c, p.Status.Conditions)
		}
		return nil
	})
	if c := p.Status.ContainerStatuses[0]; c.RestartCount != 1 || c.LastTerminationState.Terminated == nil {
		t.Errorf("after restart: restartCount %d, last state %+v", c.RestartCount, c.LastTerminationState)
	}
	if n := runs(t, count); n != 2 {
		t.Errorf("%d runs, want 2", n)
	}
}

// A runtime that keeps crashing is restarted with a growing back-off, and
// no more once its pod is being deleted.
func TestCrashLoopStopsWithThePod(t *testing.T) {
	dir := t.TempDir()
	count := filepath.Join(dir, "runs")
	_, cs, _ := testRunner(t, fmt.Sprintf(`echo run >> %s; exit 1`, count), runningPod("s-0", "uid-1"))
	waitPod(t, cs, "s-0", "two restarts", func(p *corev1.Pod) error {
		if n := p.Status.ContainerStatuses[0].RestartCount; n < 2 {
			return fmt.Errorf("restartCount %d", n)
		}
		return nil
	})
	if p, _ := cs.CoreV1().Pods("ns").Get(t.Context(), "s-0", metav1.GetOptions{}); !strings.Contains(p.Status.ContainerStatuses[0].State.Waiting.Message, "back-off 400ms") {
		t.Errorf("second back-off: %q", p.Status.ContainerStatuses[0].State.Waiting.Message)
	}
	p, _ := cs.CoreV1().Pods("ns").Get(t.Context(), "s-0", metav1.GetOptions{})
	p.DeletionTimestamp = ptrTime(metav1.Now())
	if _, err := cs.CoreV1().Pods("ns").Update(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	n := runs(t, count)
	time.Sleep(time.Second) // more than the longest back-off
	if m := runs(t, count); m != n {
		t.Errorf("runtime restarted %d times after its pod was marked for deletion", m-n)
	}
}

// The status of a pod that is not the one the process ran for (same name,
// new UID) is never touched.
func TestPatchOnlyThePodTheProcessRanFor(t *testing.T) {
	r, cs, _ := testRunner(t, "exec sleep 60")
	newPod := runningPod("s-0", "uid-2")
	if _, err := cs.CoreV1().Pods("ns").Create(t.Context(), newPod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before, _ := cs.CoreV1().Pods("ns").Get(t.Context(), "s-0", metav1.GetOptions{})
	old := &proc{pod: runningPod("s-0", "uid-1")}
	alive, err := r.patchContainer(t.Context(), old, false, func(cs *corev1.ContainerStatus) { cs.Ready = false })
	if alive || err != nil {
		t.Errorf("patch for the old pod: alive %v, err %v", alive, err)
	}
	after, _ := cs.CoreV1().Pods("ns").Get(t.Context(), "s-0", metav1.GetOptions{})
	if after.ResourceVersion != before.ResourceVersion || !after.Status.ContainerStatuses[0].Ready {
		t.Errorf("new pod's status changed: %+v", after.Status)
	}
}

func ptrTime(t metav1.Time) *metav1.Time { return &t }

// One pod's slow start (its token request hangs on a loaded API server)
// holds up no other pod: a pod marked for deletion meanwhile has its
// processes stopped and its deletion finished. The informer calls the
// runner for every pod in turn; at 2,000 sessions starts made inline
// there kept a rollout's old pods in Terminating for minutes.
func TestSlowStartHoldsUpNoDeletion(t *testing.T) {
	gate := newTokenGate("slow-0")
	e := newSlowTokenEnv(t, gate, runningPod("gone-0", "uid-gone"))
	cs := e.cs
	waitPod(t, cs, "gone-0", "runtime of gone-0 started", func(p *corev1.Pod) error {
		if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Running == nil {
			return fmt.Errorf("container statuses %+v", p.Status.ContainerStatuses)
		}
		return nil
	})
	if _, err := cs.CoreV1().Pods("ns").Create(t.Context(), runningPod("slow-0", "uid-slow"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gate.waitAsked(t)

	p, err := cs.CoreV1().Pods("ns").Get(t.Context(), "gone-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.DeletionTimestamp = ptrTime(metav1.Now())
	if _, err := cs.CoreV1().Pods("ns").Update(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := cs.CoreV1().Pods("ns").Get(t.Context(), "gone-0", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gone-0 still there while slow-0's start hangs (err %v): its deletion waits behind another pod's start", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tokenGate holds the token requests for one pod until it is opened.
type tokenGate struct {
	pod      string
	asked    chan struct{}
	released chan struct{}
	once     sync.Once
}

func newTokenGate(pod string) *tokenGate {
	return &tokenGate{pod: pod, asked: make(chan struct{}, 1), released: make(chan struct{})}
}

// hang blocks a token request for the gate's pod until the gate opens.
func (g *tokenGate) hang(pod string) {
	if pod != g.pod {
		return
	}
	select {
	case g.asked <- struct{}{}:
	default:
	}
	<-g.released
}

// open lets the held requests through; it may be called more than once.
func (g *tokenGate) open() { g.once.Do(func() { close(g.released) }) }

// waitAsked waits until the gate's pod has asked for a token.
func (g *tokenGate) waitAsked(t *testing.T) {
	t.Helper()
	select {
	case <-g.asked:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s's token was never requested", g.pod)
	}
}

// newSlowTokenEnv is a test env whose runtimes run `sleep 60` and whose
// token requests pass gate; the gate opens before the env's cleanup,
// which waits for the runner.
func newSlowTokenEnv(t *testing.T, gate *tokenGate, pods ...*corev1.Pod) *testEnv {
	t.Helper()
	e := newTestEnvWrapped(t, Options{Command: func(*corev1.Pod, *corev1.Container) (string, []string) {
		return "/bin/sh", []string{"-c", "sleep 60"}
	}}, func(cs *fake.Clientset) kubernetes.Interface { return slowTokens{cs, gate.hang} }, pods)
	t.Cleanup(gate.open)
	return e
}

// slowTokens is a clientset whose token requests call hang with the name
// of the pod the token is bound to first.
type slowTokens struct {
	*fake.Clientset
	hang func(pod string)
}

func (c slowTokens) CoreV1() corev1client.CoreV1Interface {
	return slowCore{c.Clientset.CoreV1(), c.hang}
}

type slowCore struct {
	corev1client.CoreV1Interface
	hang func(pod string)
}

func (c slowCore) ServiceAccounts(ns string) corev1client.ServiceAccountInterface {
	return slowServiceAccounts{c.CoreV1Interface.ServiceAccounts(ns), c.hang}
}

type slowServiceAccounts struct {
	corev1client.ServiceAccountInterface
	hang func(pod string)
}

func (s slowServiceAccounts) CreateToken(ctx context.Context, name string, tr *authenticationv1.TokenRequest, opts metav1.CreateOptions) (*authenticationv1.TokenRequest, error) {
	if tr.Spec.BoundObjectRef != nil {
		s.hang(tr.Spec.BoundObjectRef.Name)
	}
	return s.ServiceAccountInterface.CreateToken(ctx, name, tr, opts)
}

// The runner starts nothing for a pod bound to a node another kubelet
// runs (the real node) and never finishes its deletion, while it runs the
// pods of every other node: a session moved from one simulated node to
// another runs on the second as it did on the first.
func TestRunnerLeavesPodsOfAnotherKubeletAlone(t *testing.T) {
	dir := t.TempDir()
	first, second, theirs := runningPod("s-0", "uid-1"), runningPod("s-2", "uid-3"), runningPod("s-1", "uid-2")
	first.Spec.NodeName, second.Spec.NodeName, theirs.Spec.NodeName = "kwok-node-0", "kwok-node-1", "real-node"
	e := newTestEnvWith(t, Options{SkipNodes: []string{"real-node"}, Command: func(pod *corev1.Pod, _ *corev1.Container) (string, []string) {
		return "/bin/sh", []string{"-c", "touch " + filepath.Join(dir, pod.Name) + "; exec sleep 60"}
	}}, []*corev1.Pod{first, second, theirs})

	for _, name := range []string{"s-0", "s-2"} {
		deadline := time.Now().Add(10 * time.Second)
		for _, err := os.Stat(filepath.Join(dir, name)); err != nil; _, err = os.Stat(filepath.Join(dir, name)) {
			if time.Now().After(deadline) {
				t.Fatalf("the pod %s of a simulated node never started: %v", name, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	p, err := e.cs.CoreV1().Pods("ns").Get(t.Context(), "s-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.DeletionTimestamp = ptrTime(metav1.Now())
	if _, err := e.cs.CoreV1().Pods("ns").Update(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if _, err := os.Stat(filepath.Join(dir, "s-1")); err == nil {
		t.Error("the runner started a process for a pod bound to another kubelet's node")
	}
	if _, err := e.cs.CoreV1().Pods("ns").Get(t.Context(), "s-1", metav1.GetOptions{}); err != nil {
		t.Errorf("the runner finished the deletion of a pod bound to another kubelet's node: %v", err)
	}
}
