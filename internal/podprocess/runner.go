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
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
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
	retrying   map[types.UID]bool // pods whose failed start is retried
	pods       cache.Store        // the informer's pods, for retries
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
	r.mu.Lock()
	r.pods = inf.GetStore()
	r.mu.Unlock()
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
		r.retryStart(ctx, pod)
	}
}

// retryStart syncs a pod again, with a growing pause, until its runtime
// starts or the pod stops needing one: a kubelet keeps trying to start a
// pod's containers, and no later update of the pod would bring another try
// (a token request the restarting API server refused, for example).
func (r *Runner) retryStart(ctx context.Context, pod *corev1.Pod) {
	r.mu.Lock()
	if r.retrying == nil {
		r.retrying = map[types.UID]bool{}
	}
	if r.retrying[pod.UID] || r.pods == nil {
		r.mu.Unlock()
		return
	}
	r.retrying[pod.UID] = true
	store := r.pods
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer func() {
			r.mu.Lock()
			delete(r.retrying, pod.UID)
			r.mu.Unlock()
		}()
		for wait := 500 * time.Millisecond; ; wait = min(2*wait, 10*time.Second) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			o, ok, _ := store.GetByKey(pod.Namespace + "/" + pod.Name)
			cur, isPod := o.(*corev1.Pod)
			if !ok || !isPod || cur.UID != pod.UID || cur.DeletionTimestamp != nil || cur.Status.Phase != corev1.PodRunning {
				return
			}
			r.mu.Lock()
			_, running := r.procs[pod.UID]
			r.mu.Unlock()
			if running {
				return
			}
			err := r.start(ctx, cur)
			if err == nil {
				return
			}
			r.logf("pod %s/%s: cannot start runtime: %v; retrying in %s\n", pod.Namespace, pod.Name, err, min(2*wait, 10*time.Second))
		}
	}()
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
		// Retried until it lands: nothing else changes a terminating pod,
		// so no later update would bring another try (an API server that
		// is restarting refuses the first ones).
		for wait := 200 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
			err := r.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
				GracePeriodSeconds: ptr.To[int64](0),
				Preconditions:      &metav1.Preconditions{UID: &uid},
			})
			if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				return
			}
			r.logf("pod %s/%s (%s): finish deletion: %v; retrying in %s\n", pod.Namespace, pod.Name, uid, err, wait)
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
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

// logf writes one time-stamped line to the runner's log.
func (r *Runner) logf(format string, args ...any) {
	fmt.Fprintf(r.opts.Log, time.Now().Format("15:04:05.000000")+" "+format, args...)
}

// logPath is the file a pod's runtime writes its output to; restarts
// append to it.
func (r *Runner) logPath(pod *corev1.Pod) string {
	return filepath.Join(r.opts.Dir, "logs", fmt.Sprintf("%s_%s_%s.log", pod.Namespace, pod.Name, pod.UID))
}
