// Package podprocess stands in for the kubelet on the local control plane:
// KWOK moves pods through their phases without running containers, and this
// runner starts each running session pod's runtime as a process on the
// host, authenticated as the pod's ServiceAccount with a TokenRequest token
// bound to the pod, and given the pod's UID the way the downward API gives
// it. When the pod is deleted the process is stopped (SIGTERM, then SIGKILL
// after the grace period), and the replacement pod gets a new process.
//
// A runtime that exits on its own while its pod runs is treated as a
// kubelet treats a crashed container: the pod's status shows the container
// in CrashLoopBackOff, not ready, with its restart count, and the process is
// restarted after a back-off (10 s, doubling, at most 5 minutes); once the
// restarted process is up, the container shows running and ready again.
package podprocess

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// EnvJournal names the file a runtime started by the runner may append its
// turn journal to (one JSON object per line).
const EnvJournal = "LULL_JOURNAL"

// Options configure a Runner.
type Options struct {
	// Config is an admin client config; the runner uses it to watch pods and
	// to request tokens, never to run a runtime.
	Config *rest.Config
	// Server and CAFile are what a runtime's kubeconfig points at.
	Server, CAFile string
	// Dir holds the per-pod kubeconfigs, logs and journals; created.
	Dir string
	// Command returns the host command that runs a pod's runtime container:
	// the binary and its arguments. The container's environment is added by
	// the runner.
	Command func(pod *corev1.Pod, c *corev1.Container) (string, []string)
	// GracePeriod is how long a stopped runtime has after SIGTERM; zero
	// means 5 s.
	GracePeriod time.Duration
	// Log receives one line per process start and stop; may be nil.
	Log io.Writer
}

// Restart back-off, as the kubelet's for a crashed container.
const (
	restartBackoff    = 10 * time.Second
	restartBackoffMax = 5 * time.Minute
	// upAfter is how long a restarted runtime must stay up before its
	// container shows running and ready again (there are no probes), so a
	// runtime that exits at once never looks ready.
	upAfter = time.Second
)

// Runner runs one host process per running session pod.
type Runner struct {
	opts   Options
	client kubernetes.Interface

	// Restart back-off: the first delay, its cap, and how long a restarted
	// process must stay up to count as running.
	backoff, backoffMax, upAfter time.Duration

	mu         sync.Mutex
	procs      map[types.UID]*proc
	finalizing map[types.UID]bool
	wg         sync.WaitGroup
}

// proc is the runtime of one pod: its current process and its restarts.
type proc struct {
	pod        *corev1.Pod // as first seen running
	kubeconfig string
	quit       chan struct{} // closed by stop: the runtime is not restarted
	quitOnce   sync.Once
	cur        *run // guarded by Runner.mu
}

// run is one process of a pod's runtime.
type run struct {
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{} // closed when the process has exited
	err     error         // its exit, once done is closed
}

func (p *proc) quitting() bool {
	select {
	case <-p.quit:
		return true
	default:
		return false
	}
}

// New returns a runner; Run starts it.
func New(opts Options) (*Runner, error) {
	if opts.GracePeriod == 0 {
		opts.GracePeriod = 5 * time.Second
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	for _, d := range []string{"kubeconfig", "logs", "journals"} {
		if err := os.MkdirAll(filepath.Join(opts.Dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	// A kubelet's pace, not client-go's default of 5 requests a second: a
	// rollout of hundreds of sessions needs a token and a final delete for
	// each pod within seconds.
	cfg := rest.CopyConfig(opts.Config)
	cfg.QPS, cfg.Burst = 500, 1000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return newRunner(opts, cs), nil
}

func newRunner(opts Options, client kubernetes.Interface) *Runner {
	return &Runner{opts: opts, client: client, procs: map[types.UID]*proc{}, finalizing: map[types.UID]bool{},
		backoff: restartBackoff, backoffMax: restartBackoffMax, upAfter: upAfter}
}

// JournalDir is where the runtimes' turn journals are written.
func (r *Runner) JournalDir() string { return filepath.Join(r.opts.Dir, "journals") }

// Run watches session pods until ctx is done, then stops every process.
func (r *Runner) Run(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(r.client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = lullv1.LabelSession
	}))
	inf := factory.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { r.sync(ctx, o.(*corev1.Pod)) },
		UpdateFunc: func(_, o any) { r.sync(ctx, o.(*corev1.Pod)) },
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if pod, ok := o.(*corev1.Pod); ok {
				r.stop(pod.UID)
			}
		},
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
	r.mu.Lock()
	for uid := range r.procs {
		go r.stop(uid)
	}
	r.mu.Unlock()
	r.wg.Wait()
	return nil
}

// sync starts the runtime of a running pod, and stops it once the pod is
// being deleted or has finished.
func (r *Runner) sync(ctx context.Context, pod *corev1.Pod) {
	if pod.DeletionTimestamp != nil {
		r.finalize(ctx, pod)
		return
	}
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		r.stop(pod.UID)
		return
	}
	if pod.Status.Phase != corev1.PodRunning || ctx.Err() != nil {
		return
	}
	r.mu.Lock()
	_, running := r.procs[pod.UID]
	r.mu.Unlock()
	if running {
		return
	}
	if err := r.start(ctx, pod); err != nil {
		r.logf("pod %s/%s: cannot start runtime: %v\n", pod.Namespace, pod.Name, err)
	}
}

func (r *Runner) start(ctx context.Context, pod *corev1.Pod) error {
	if runtimeContainer(pod) == nil {
		return fmt.Errorf("no containers")
	}
	kubeconfig, err := r.writeKubeconfig(ctx, pod)
	if err != nil {
		return err
	}
	p := &proc{pod: pod.DeepCopy(), kubeconfig: kubeconfig, quit: make(chan struct{})}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, running := r.procs[pod.UID]; running {
		return nil
	}
	if err := r.launch(p); err != nil {
		return err
	}
	r.procs[pod.UID] = p
	r.wg.Add(1)
	go r.supervise(ctx, p)
	return nil
}

// launch starts a process of p's runtime, its output appended to the pod's
// log, unless p is being stopped. r.mu must be held.
func (r *Runner) launch(p *proc) error {
	if p.quitting() {
		return errors.New("pod is stopping")
	}
	pod := p.pod
	c := runtimeContainer(pod)
	base := fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID)
	logf, err := os.OpenFile(r.logPath(pod), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	name, args := r.opts.Command(pod, c)
	cmd := exec.Command(name, args...)
	cmd.Env = append(containerEnv(pod, c), "KUBECONFIG="+p.kubeconfig, EnvJournal+"="+filepath.Join(r.JournalDir(), base+".jsonl"), "HOME="+os.Getenv("HOME"), "PATH="+os.Getenv("PATH"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	cur := &run{cmd: cmd, started: time.Now(), done: make(chan struct{})}
	p.cur = cur
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		cur.err = cmd.Wait()
		logf.Close()
		close(cur.done)
		r.logf("pod %s/%s (%s): runtime exited: %v\n", pod.Namespace, pod.Name, pod.UID, exitText(cur.err))
	}()
	r.logf("pod %s/%s (%s): runtime started, pid %d\n", pod.Namespace, pod.Name, pod.UID, cmd.Process.Pid)
	return nil
}

// supervise restarts p's runtime when it exits on its own, as a kubelet
// restarts a crashed container: the pod's status shows CrashLoopBackOff
// during a back-off of 10 s, doubling up to 5 minutes (reset once a
// process has run for twice that), and the process is restarted as long as
// the pod is still the same pod, Running and not being deleted. It returns
// once p is stopped or its pod has gone.
func (r *Runner) supervise(ctx context.Context, p *proc) {
	defer r.wg.Done()
	pod := p.pod
	backoff := r.backoff
	var restarts int32
	for {
		r.mu.Lock()
		cur := p.cur
		r.mu.Unlock()
		if restarts > 0 {
			// A restart: the container shows CrashLoopBackOff until the
			// process has been up for a moment.
			select {
			case <-time.After(r.upAfter):
				if _, err := r.patchContainer(ctx, p, true, func(cs *corev1.ContainerStatus) {
					cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(cur.started)}}
					cs.Ready, cs.Started, cs.RestartCount = true, ptr.To(true), restarts
				}); err != nil {
					r.logf("pod %s/%s (%s): report the restarted runtime running: %v\n", pod.Namespace, pod.Name, pod.UID, err)
				}
			case <-cur.done:
			case <-p.quit:
			case <-ctx.Done():
			}
		}
		select {
		case <-cur.done:
		case <-p.quit:
			return // stop waits for the process
		case <-ctx.Done():
			return
		}
		finished := time.Now()
		if p.quitting() || ctx.Err() != nil {
			return
		}

		// The runtime exited on its own while its pod runs.
		if finished.Sub(cur.started) >= 2*r.backoffMax {
			backoff = r.backoff // it had been running fine for long
		}
		restarts++
		tail := logTail(r.logPath(pod), 2)
		code, reason := exitCode(cur.err)
		alive, err := r.patchContainer(ctx, p, false, func(cs *corev1.ContainerStatus) {
			cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
				Reason:  "CrashLoopBackOff",
				Message: fmt.Sprintf("back-off %s restarting failed container %s (%s): %s", backoff, cs.Name, exitText(cur.err), tail),
			}}
			cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: code, Reason: reason, Message: tail,
				StartedAt: metav1.NewTime(cur.started), FinishedAt: metav1.NewTime(finished),
			}}
			cs.Ready, cs.Started, cs.RestartCount = false, ptr.To(false), restarts
		})
		if err != nil {
			r.logf("pod %s/%s (%s): report the crashed runtime: %v\n", pod.Namespace, pod.Name, pod.UID, err)
		}
		if !alive {
			return // the pod is gone, replaced, terminating or finished
		}
		r.logf("pod %s/%s (%s): runtime crashed (%s); restart %d in %s\n", pod.Namespace, pod.Name, pod.UID, exitText(cur.err), restarts, backoff)
		select {
		case <-time.After(backoff):
		case <-p.quit:
			return
		case <-ctx.Done():
			return
		}
		backoff = min(2*backoff, r.backoffMax)
		if alive, err := r.podRunning(ctx, p); err != nil {
			r.logf("pod %s/%s (%s): before restart: %v\n", pod.Namespace, pod.Name, pod.UID, err)
		} else if !alive {
			return
		}
		r.mu.Lock()
		err = r.launch(p)
		r.mu.Unlock()
		if err != nil {
			r.logf("pod %s/%s (%s): cannot restart runtime: %v\n", pod.Namespace, pod.Name, pod.UID, err)
			return
		}
	}
}

// podRunning reads p's pod: alive is true while it is the pod p ran for
// (same UID), Running and not being deleted.
func (r *Runner) podRunning(ctx context.Context, p *proc) (alive bool, err error) {
	_, alive, err = r.currentPod(ctx, p)
	return alive, err
}

func (r *Runner) currentPod(ctx context.Context, p *proc) (*corev1.Pod, bool, error) {
	pod, err := r.client.CoreV1().Pods(p.pod.Namespace).Get(ctx, p.pod.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, err // unknown: assume it still runs
	}
	alive := pod.UID == p.pod.UID && pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodRunning
	return pod, alive, nil
}

// patchContainer writes, as a kubelet does, the status of p's runtime
// container (set by mutate) and the pod's Ready and ContainersReady
// conditions, through the pods/status subresource. It reads the pod first
// and patches only the pod p ran for (same UID), Running and not being
// deleted, with the resourceVersion it read as a precondition, rereading
// on conflict: a new pod of the same name is never touched. alive reports
// whether the pod still is that pod, Running and not being deleted.
func (r *Runner) patchContainer(ctx context.Context, p *proc, ready bool, mutate func(*corev1.ContainerStatus)) (alive bool, err error) {
	name := runtimeContainer(p.pod).Name
	for range 5 {
		pod, alive, err := r.currentPod(ctx, p)
		if err != nil || !alive {
			return alive, err
		}
		st := pod.Status.DeepCopy()
		i := slices.IndexFunc(st.ContainerStatuses, func(cs corev1.ContainerStatus) bool { return cs.Name == name })
		if i < 0 {
			st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{Name: name, Image: runtimeContainer(pod).Image})
			i = len(st.ContainerStatuses) - 1
		}
		mutate(&st.ContainerStatuses[i])
		status, reason, msg := corev1.ConditionTrue, "", ""
		if !ready {
			status, reason, msg = corev1.ConditionFalse, "ContainersNotReady", fmt.Sprintf("containers with unready status: [%s]", name)
		}
		for _, typ := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady} {
			setPodCondition(st, corev1.PodCondition{Type: typ, Status: status, Reason: reason, Message: msg})
		}
		patch, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": pod.ResourceVersion},
			"status":   map[string]any{"conditions": st.Conditions, "containerStatuses": st.ContainerStatuses},
		})
		if err != nil {
			return true, err
		}
		_, err = r.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
		switch {
		case apierrors.IsConflict(err):
			continue // changed since read: read again
		case apierrors.IsNotFound(err):
			return false, nil
		}
		return true, err
	}
	return true, errors.New("status patch kept conflicting")
}

// setPodCondition sets a condition, moving its transition time only when
// its status changes.
func setPodCondition(st *corev1.PodStatus, c corev1.PodCondition) {
	now := metav1.Now()
	for i := range st.Conditions {
		if st.Conditions[i].Type != c.Type {
			continue
		}
		c.LastTransitionTime = st.Conditions[i].LastTransitionTime
		if st.Conditions[i].Status != c.Status {
			c.LastTransitionTime = now
		}
		c.LastProbeTime = st.Conditions[i].LastProbeTime
		st.Conditions[i] = c
		return
	}
	c.LastTransitionTime = now
	st.Conditions = append(st.Conditions, c)
}

// finalize finishes a pod's deletion as a kubelet does: the runtime is
// stopped, then the pod is deleted with grace period 0 and its UID as a
// precondition, so a new pod of the same name is never touched. It runs
// once per pod UID.
func (r *Runner) finalize(ctx context.Context, pod *corev1.Pod) {
	r.mu.Lock()
	if r.finalizing[pod.UID] {
		r.mu.Unlock()
		return
	}
	r.finalizing[pod.UID] = true
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.stop(pod.UID)
		uid := pod.UID
		err := r.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0),
			Preconditions:      &metav1.Preconditions{UID: &uid},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			r.logf("pod %s/%s (%s): finish deletion: %v\n", pod.Namespace, pod.Name, uid, err)
			r.mu.Lock()
			delete(r.finalizing, uid) // the next update retries
			r.mu.Unlock()
		}
	}()
}

// stop ends a pod's runtime for good: no restart, SIGTERM to the process
// group of its current process, SIGKILL after the grace period. The entry
// stays in procs so the pod is never started twice.
func (r *Runner) stop(uid types.UID) {
	r.mu.Lock()
	p, ok := r.procs[uid]
	var cur *run
	if ok {
		p.quitOnce.Do(func() { close(p.quit) })
		cur = p.cur
	}
	r.mu.Unlock()
	if cur == nil {
		return
	}
	select {
	case <-cur.done:
		return
	default:
	}
	_ = syscall.Kill(-cur.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-cur.done:
	case <-time.After(r.opts.GracePeriod):
		_ = syscall.Kill(-cur.cmd.Process.Pid, syscall.SIGKILL)
		<-cur.done
	}
}

// writeKubeconfig requests a token for the pod's ServiceAccount, bound to
// the pod, and writes a kubeconfig that authenticates with it.
func (r *Runner) writeKubeconfig(ctx context.Context, pod *corev1.Pod) (string, error) {
	tr, err := r.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To[int64](24 * 3600),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("request token for serviceaccount %s: %w", pod.Spec.ServiceAccountName, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["dev"] = &clientcmdapi.Cluster{Server: r.opts.Server, CertificateAuthority: r.opts.CAFile}
	cfg.AuthInfos["runtime"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["dev"] = &clientcmdapi.Context{Cluster: "dev", AuthInfo: "runtime", Namespace: pod.Namespace}
	cfg.CurrentContext = "dev"
	path := filepath.Join(r.opts.Dir, "kubeconfig", fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID))
	return path, clientcmd.WriteToFile(*cfg, path)
}

func runtimeContainer(pod *corev1.Pod) *corev1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == "runtime" {
			return &pod.Spec.Containers[i]
		}
	}
	if len(pod.Spec.Containers) > 0 {
		return &pod.Spec.Containers[0]
	}
	return nil
}

// containerEnv resolves a container's environment as the kubelet would for
// literal values and the downward API's pod fields.
func containerEnv(pod *corev1.Pod, c *corev1.Container) []string {
	var env []string
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				v = pod.Name
			case "metadata.namespace":
				v = pod.Namespace
			case "metadata.uid":
				v = string(pod.UID)
			case "spec.nodeName":
				v = pod.Spec.NodeName
			case "spec.serviceAccountName":
				v = pod.Spec.ServiceAccountName
			}
		}
		env = append(env, e.Name+"="+v)
	}
	return env
}

// logf writes one time-stamped line to the runner's log.
func (r *Runner) logf(format string, args ...any) {
	fmt.Fprintf(r.opts.Log, time.Now().Format("15:04:05.000000")+" "+format, args...)
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// exitCode returns a process's exit code as a kubelet reports it (128 +
// the signal for a killed process) and the termination reason.
func exitCode(err error) (int32, string) {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		if err != nil {
			return 128, "Error"
		}
		return 0, "Completed"
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int32(ws.Signal()), "Error"
	}
	return int32(ee.ExitCode()), "Error"
}

// logPath is the file a pod's runtime writes its output to; restarts
// append to it.
func (r *Runner) logPath(pod *corev1.Pod) string {
	return filepath.Join(r.opts.Dir, "logs", fmt.Sprintf("%s_%s_%s.log", pod.Namespace, pod.Name, pod.UID))
}

// logTail returns the last n non-empty lines of a log, joined by " | ",
// at most 512 bytes.
func logTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "(no log)"
	}
	defer f.Close()
	const window = 8 << 10
	buf := make([]byte, window)
	size, _ := f.Seek(0, io.SeekEnd)
	off := max(size-window, 0)
	k, _ := f.ReadAt(buf, off)
	var lines []string
	for _, l := range strings.Split(string(buf[:k]), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if off > 0 && len(lines) > 0 {
		lines = lines[1:] // maybe cut
	}
	if len(lines) == 0 {
		return "(empty log)"
	}
	out := strings.Join(lines[max(len(lines)-n, 0):], " | ")
	if len(out) > 512 {
		out = "…" + out[len(out)-511:]
	}
	return out
}
