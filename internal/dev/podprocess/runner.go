package podprocess

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/requestmetrics"
)

// EnvJournal names the file a runtime started by the runner may append its
// turn journal to (one JSON object per line).
const EnvJournal = "LULL_JOURNAL"

// Options configure a Runner.
type Options struct {
	// Config is an admin client config; the runner uses it to watch pods,
	// to read claims and volumes and to request tokens, never to run a
	// process.
	Config *rest.Config
	// Server and CAFile are what a process's kubeconfig points at.
	Server, CAFile string
	// Dir holds the per-pod kubeconfigs, logs, journals and emptyDir
	// volumes; created, and made absolute.
	Dir string
	// Command returns the host command that runs a container of a pod: the
	// binary and its arguments. It is called for the runtime container and,
	// when the pod has one, for the agent sidecar (the init container
	// lullv1.AgentContainerName). The runner rewrites mount paths in the
	// arguments and adds the container's environment.
	Command func(pod *corev1.Pod, c *corev1.Container) (string, []string)
	// Mode is how a pod's runtime container runs: ModeProcess (the
	// default) a host process of Command, ModeFleet Program in a goroutine
	// of this process.
	Mode Mode
	// Program returns the in-process program that runs a pod's runtime
	// container in ModeFleet, and its arguments (the runner rewrites mount
	// paths in them and gives it the container's environment, as to a
	// process). Required in ModeFleet.
	Program func(pod *corev1.Pod, c *corev1.Container) (Program, []string)
	// GracePeriod is how long a stopped process has after SIGTERM (an
	// in-process runtime after its context is cancelled); zero means 5 s.
	GracePeriod time.Duration
	// Log receives one line per process start and stop; may be nil.
	Log io.Writer
	// SkipNodes are the nodes whose pods another kubelet runs (the local
	// environment's real node): a pod bound to one of them is left alone,
	// its deletion included. The pods of every other node are the
	// runner's: those of the simulated nodes, however many there are, so
	// a session drained off one simulated node runs again on another.
	SkipNodes []string
}

// Runner runs host processes for the containers of running session pods.
type Runner struct {
	opts   Options
	client kubernetes.Interface
	// transport carries the API requests of every in-process runtime
	// (ModeFleet); nil otherwise. requests counts them.
	transport http.RoundTripper
	requests  *requestmetrics.Tally

	// Restart back-off: the first delay, its cap, and how long a restarted
	// process must stay up to count as running.
	backoff, backoffMax, upAfter time.Duration
	// listenWait bounds the wait for the agent sidecar to listen.
	listenWait time.Duration

	mu         sync.Mutex
	procs      map[types.UID]*proc
	finalizing map[types.UID]bool
	starting   map[types.UID]bool // pods whose start (or its retries) runs
	// gone holds pods stopped for good without finalize (removed, or
	// Failed/Succeeded): a start under way when they were stopped must
	// register nothing, or its processes would run on unowned.
	gone    map[types.UID]bool
	closing bool        // Run is stopping every pod: start no more
	pods    cache.Store // the informer's pods, for retries
	wg      sync.WaitGroup
}

// proc is the processes of one pod: its runtime's and its agent sidecar's.
type proc struct {
	pod      *corev1.Pod // as first seen running
	runtime  *container
	agent    *container    // nil without the agent sidecar
	quit     chan struct{} // closed by halt: nothing is restarted
	quitOnce sync.Once
}

// containers returns p's containers in start order: the sidecar first.
func (p *proc) containers() []*container {
	if p.agent == nil {
		return []*container{p.runtime}
	}
	return []*container{p.agent, p.runtime}
}

// run is one process of a container, or one run of its in-process
// program.
type run struct {
	started time.Time
	done    chan struct{} // closed when the process has exited
	err     error         // its exit, once done is closed
	// term asks it to stop: SIGTERM to the process group, or the
	// program's context cancelled. kill ends it at once: SIGKILL to the
	// process group; nil for a program, which cannot be killed.
	term, kill func()
	// abandoned is set once a program overran its grace period: it is
	// not waited for again.
	abandoned atomic.Bool
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
	switch opts.Mode {
	case "":
		opts.Mode = ModeProcess
	case ModeProcess:
	case ModeFleet:
		if opts.Program == nil {
			return nil, errors.New("podprocess: ModeFleet needs Options.Program")
		}
	default:
		return nil, fmt.Errorf("podprocess: mode %q: want %s or %s", opts.Mode, ModeProcess, ModeFleet)
	}
	// Absolute: the host directories written into env values and args
	// (unix:// socket URLs among them) must not depend on a process's
	// working directory.
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	opts.Dir = dir
	for _, d := range []string{"kubeconfig", "logs", "journals", "volumes"} {
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
	r := newRunner(opts, cs)
	if opts.Mode == ModeFleet {
		if r.transport, err = sharedTransport(opts.Server, opts.CAFile); err != nil {
			return nil, err
		}
		r.requests = requestmetrics.NewTally()
		r.transport = r.requests.Wrap(r.transport)
	}
	return r, nil
}

func newRunner(opts Options, client kubernetes.Interface) *Runner {
	return &Runner{opts: opts, client: client, procs: map[types.UID]*proc{}, finalizing: map[types.UID]bool{},
		backoff: restartBackoff, backoffMax: restartBackoffMax, upAfter: upAfter, listenWait: listenWait}
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
				// Not in the informer's goroutine: a stop waits for the
				// processes, up to the grace period.
				r.wg.Go(func() {
					r.stopForGood(pod.UID)
					r.removeVolumes(pod)
				})
			}
		},
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
	// Every pod's containers stopped at once, each within its grace period
	// (an in-process runtime that overruns it is abandoned, not waited
	// for).
	var stops sync.WaitGroup
	r.mu.Lock()
	// A start still under way registers nothing from now on.
	r.closing = true
	for uid := range r.procs {
		stops.Go(func() { r.stop(uid) })
	}
	r.mu.Unlock()
	stops.Wait()
	r.wg.Wait()
	return nil
}

// sync starts the processes of a running pod, and stops them once the pod
// is being deleted or has finished. It never blocks on the API server or
// on a process: the informer calls it for every pod in turn, and one slow
// start (a token request, a claim read) held up the deletion of every pod
// behind it — at 2,000 sessions the pods of a rollout waited minutes in
// Terminating. Each pod's start runs in its own goroutine, as a kubelet
// has a worker per pod.
func (r *Runner) sync(ctx context.Context, pod *corev1.Pod) {
	if pod.Spec.NodeName != "" && slices.Contains(r.opts.SkipNodes, pod.Spec.NodeName) {
		return // another kubelet's
	}
	if pod.DeletionTimestamp != nil {
		r.finalize(ctx, pod)
		return
	}
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		uid := pod.UID
		r.wg.Go(func() { r.stopForGood(uid) })
		return
	}
	if pod.Status.Phase != corev1.PodRunning || ctx.Err() != nil {
		return
	}
	r.startAsync(ctx, pod)
}

// startAsync starts pod's processes in a goroutine of its own, unless they
// run or are being started. A failed start is tried again, with a growing
// pause, until the processes start or the pod stops needing them: a
// kubelet keeps trying to start a pod's containers, and no later update of
// the pod would bring another try (a token request the restarting API
// server refused, a claim bound since, for example).
func (r *Runner) startAsync(ctx context.Context, pod *corev1.Pod) {
	uid := pod.UID
	r.mu.Lock()
	if r.starting == nil {
		r.starting = map[types.UID]bool{}
	}
	if _, running := r.procs[uid]; running || r.starting[uid] || r.finalizing[uid] || r.gone[uid] {
		r.mu.Unlock()
		return
	}
	r.starting[uid] = true
	store := r.pods
	r.mu.Unlock()
	r.wg.Go(func() {
		defer func() {
			r.mu.Lock()
			delete(r.starting, uid)
			r.mu.Unlock()
		}()
		for wait := 500 * time.Millisecond; ; wait = min(2*wait, 10*time.Second) {
			err := r.start(ctx, pod)
			if err == nil || ctx.Err() != nil || store == nil {
				if err != nil && ctx.Err() == nil {
					r.logf("pod %s/%s: cannot start: %v\n", pod.Namespace, pod.Name, err)
				}
				return
			}
			r.logf("pod %s/%s: cannot start: %v; retrying in %s\n", pod.Namespace, pod.Name, err, wait)
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			o, ok, _ := store.GetByKey(pod.Namespace + "/" + pod.Name)
			cur, isPod := o.(*corev1.Pod)
			if !ok || !isPod || cur.UID != uid || cur.DeletionTimestamp != nil || cur.Status.Phase != corev1.PodRunning {
				return
			}
			r.mu.Lock()
			_, running := r.procs[uid]
			r.mu.Unlock()
			if running {
				return
			}
			pod = cur
		}
	})
}

// start prepares pod's processes and starts them. On error nothing of the
// pod runs and it may be started again.
func (r *Runner) start(ctx context.Context, pod *corev1.Pod) error {
	p, err := r.prepare(ctx, pod)
	if err != nil {
		return err
	}
	r.mu.Lock()
	if _, running := r.procs[pod.UID]; running || r.finalizing[pod.UID] || r.gone[pod.UID] || r.closing {
		r.mu.Unlock()
		return nil
	}
	r.procs[pod.UID] = p
	r.mu.Unlock()
	if err := r.startContainers(ctx, p); err != nil {
		r.abandon(p)
		return err
	}
	return nil
}

// abandon stops the processes of a pod whose start failed and forgets it,
// so that it is started again, unless stop has stopped it for good.
func (r *Runner) abandon(p *proc) {
	r.mu.Lock()
	stopped := p.quitting()
	r.mu.Unlock()
	r.halt(p)
	if stopped {
		return
	}
	r.mu.Lock()
	if r.procs[p.pod.UID] == p {
		delete(r.procs, p.pod.UID)
	}
	r.mu.Unlock()
}

// launchLocked is launch with r.mu held.
func (r *Runner) launchLocked(p *proc, c *container) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.launch(p, c)
}

// launch starts a process of c (or a run of its in-process program), its
// output appended to c's log, unless p is being stopped. r.mu must be
// held.
func (r *Runner) launch(p *proc, c *container) error {
	if p.quitting() {
		return errors.New("pod is stopping")
	}
	if c.program != nil {
		return r.launchProgram(p, c)
	}
	pod := p.pod
	logf, err := os.OpenFile(c.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.path, c.args...)
	cmd.Env = c.env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("container %s: %w", c.name, err)
	}
	pgid := cmd.Process.Pid
	cur := &run{started: time.Now(), done: make(chan struct{}),
		term: func() { _ = syscall.Kill(-pgid, syscall.SIGTERM) },
		kill: func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) }}
	c.cur = cur
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		cur.err = cmd.Wait()
		logf.Close()
		close(cur.done)
		r.logf("pod %s/%s (%s): container %s exited: %v\n", pod.Namespace, pod.Name, pod.UID, c.name, exitText(cur.err))
	}()
	r.logf("pod %s/%s (%s): container %s started, pid %d\n", pod.Namespace, pod.Name, pod.UID, c.name, cmd.Process.Pid)
	return nil
}

// logf writes one time-stamped line to the runner's log.
func (r *Runner) logf(format string, args ...any) {
	fmt.Fprintf(r.opts.Log, time.Now().Format("15:04:05.000000")+" "+format, args...)
}

// podBase names a pod's files: namespace, name and UID.
func podBase(pod *corev1.Pod) string {
	return fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID)
}

// logPath is the file a pod's runtime writes its output to; restarts
// append to it.
func (r *Runner) logPath(pod *corev1.Pod) string {
	return filepath.Join(r.opts.Dir, "logs", podBase(pod)+".log")
}

// sidecarLogPath is the file a pod's agent sidecar writes its output to.
func (r *Runner) sidecarLogPath(pod *corev1.Pod) string {
	return strings.TrimSuffix(r.logPath(pod), ".log") + "_" + lullv1.AgentContainerName + ".log"
}
