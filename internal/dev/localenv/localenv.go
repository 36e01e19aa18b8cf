// Package localenv is lull running on the local control plane: the cluster
// from package devcluster with lull installed, the controller as its own
// process authenticated as its ServiceAccount (so its generated RBAC is what
// is exercised), the pod runner that starts a runtime process (a goroutine
// in fleet mode, Options.Runtimes; and an agent process for a pod with the
// agent sidecar) for every running session pod,
// and the provisioner of the lull-dev StorageClass that gives session pods'
// claims a directory on this host. `lull dev`, the demo, the end-to-end
// tests and the
// benchmark all start from here.
package localenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/examples/turnrunner"
	"lull.dev/lull/internal/dev/devcluster"
	"lull.dev/lull/internal/dev/devstorage"
	"lull.dev/lull/internal/dev/install"
	"lull.dev/lull/internal/dev/podprocess"
)

// Options configure Up.
type Options struct {
	// StateDir holds everything the environment writes; empty means a new
	// directory under the system temp dir.
	StateDir string
	// Progress receives one line per startup step; may be nil.
	Progress io.Writer
	// LullBinary is the lull executable that runs the controller, the
	// reference runtimes and the agent sidecars; empty means this process's
	// own executable.
	LullBinary string
	// RuntimeArgs are added to every reference runtime's arguments, after
	// the container's own.
	RuntimeArgs []string
	// ControllerArgs are added to the controller's arguments.
	ControllerArgs []string
	// Runtimes is how the reference runtimes run: podprocess.ModeProcess
	// (the default) a host process per session pod, podprocess.ModeFleet
	// a goroutine per session pod in this process (see
	// docs/benchmarks.md, "Fleet mode").
	Runtimes podprocess.Mode
	// RealNode adds the real node (containerd, runc and a kubelet on this
	// machine, docs/real-node.md) with lull's images imported: the pods
	// of templates placed with OnRealNode run there as real containers.
	// Linux and root only; the pod runner leaves that node's pods alone.
	RealNode bool
}

// Env is a running local environment.
type Env struct {
	Cluster *devcluster.Cluster
	Runner  *podprocess.Runner

	opts           Options
	controllerConf string
	metricsAddr    string
	healthAddr     string

	mu         sync.Mutex
	controller *Controller // the default controller, without leader election

	runnerStop context.CancelFunc
	runnerDone chan struct{}

	provisionerStop context.CancelFunc
	provisionerDone chan struct{}
}

// Up starts the control plane, installs lull and the lull-dev StorageClass
// with its provisioner, starts the controller and the pod runner. On any
// failure it stops what it started.
func Up(ctx context.Context, opts Options) (_ *Env, err error) {
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if opts.LullBinary == "" {
		if opts.LullBinary, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	devOpts := devcluster.Options{StateDir: opts.StateDir, Progress: opts.Progress}
	if opts.RealNode {
		if err := devcluster.CheckRealNodeHost(); err != nil {
			return nil, err
		}
		// Before the images are built: a node in use is refused at once.
		if err := devcluster.CheckRealNodeFree(); err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "lull-images-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir) // imported into containerd by Start
		if devOpts.NodeImages, err = buildNodeImages(ctx, dir, opts.Progress); err != nil {
			return nil, err
		}
		devOpts.RealNode, devOpts.PauseImage = true, PauseImage
	}
	cl, err := devcluster.Start(ctx, devOpts)
	if err != nil {
		return nil, err
	}
	e := &Env{Cluster: cl, opts: opts}
	defer func() {
		if err != nil {
			_ = e.Down()
		}
	}()

	start := time.Now()
	if err := install.All(ctx, cl.Config); err != nil {
		return nil, fmt.Errorf("install lull: %w", err)
	}
	fmt.Fprintf(opts.Progress, "lull installed: CRDs, RBAC, admission policy (%s)\n", since(start))

	// Before the controller: the claims of the first session pods are
	// provisioned as soon as they exist.
	if err := e.startProvisioner(ctx); err != nil {
		return nil, err
	}

	if e.controllerConf, err = e.serviceAccountKubeconfig(ctx, install.Namespace, "lull-controller"); err != nil {
		return nil, err
	}
	if err := e.StartController(ctx); err != nil {
		return nil, err
	}

	runner, err := podprocess.New(podprocess.Options{
		Config: cl.Config, Server: cl.Server, CAFile: cl.CAFile,
		Dir: filepath.Join(cl.StateDir, "pods"),
		Command: func(_ *corev1.Pod, c *corev1.Container) (string, []string) {
			if c.Name == lullv1.AgentContainerName {
				// The injected sidecar runs `lull agent` with its args.
				return opts.LullBinary, append([]string{"agent"}, c.Args...)
			}
			args := append([]string{"example-runtime"}, c.Args...)
			return opts.LullBinary, append(args, opts.RuntimeArgs...)
		},
		Mode: opts.Runtimes,
		Program: func(_ *corev1.Pod, c *corev1.Container) (podprocess.Program, []string) {
			return referenceRuntime, append(slices.Clone(c.Args), opts.RuntimeArgs...)
		},
		Log:       logFile(filepath.Join(cl.StateDir, "logs", "pod-runner.log")),
		SkipNodes: realNodes(cl),
	})
	if err != nil {
		return nil, err
	}
	if opts.RealNode {
		// The real node's runtimes (user 65532) journal there through a
		// hostPath (OnRealNode).
		if err := os.Chmod(runner.JournalDir(), 0o777); err != nil {
			return nil, err
		}
	}
	e.Runner = runner
	runCtx, cancel := context.WithCancel(context.Background())
	e.runnerStop, e.runnerDone = cancel, make(chan struct{})
	go func() {
		defer close(e.runnerDone)
		_ = runner.Run(runCtx)
	}()
	if opts.Runtimes == podprocess.ModeFleet {
		fmt.Fprintf(opts.Progress, "pod runner started (fleet mode): each running session pod gets a runtime goroutine in this process\n")
	} else {
		fmt.Fprintf(opts.Progress, "pod runner started: each running session pod gets a runtime process\n")
	}
	return e, nil
}

// realNodes names the nodes of cl whose pods a kubelet runs: the real
// node, if cl has one. The pod runner runs the pods of every other node,
// the simulated ones.
func realNodes(cl *devcluster.Cluster) []string {
	if cl.RealNodeName == "" {
		return nil
	}
	return []string{cl.RealNodeName}
}

// referenceRuntime runs `lull example-runtime` in this process: the
// program of a session pod's runtime container in fleet mode.
func referenceRuntime(ctx context.Context, inv podprocess.Invocation) error {
	return turnrunner.Main(ctx, turnrunner.Process{Args: inv.Args, Env: inv.Env, Stdout: inv.Output, Stderr: inv.Output, Transport: inv.Transport})
}

// startProvisioner creates the lull-dev StorageClass (the default class)
// and starts its provisioner; volumes are directories under
// <StateDir>/volumes, its log logs/provisioner.log.
func (e *Env) startProvisioner(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(e.Cluster.Config)
	if err != nil {
		return err
	}
	if err := devstorage.EnsureStorageClass(ctx, cs); err != nil {
		return err
	}
	dir := filepath.Join(e.Cluster.StateDir, "volumes")
	p, err := devstorage.New(devstorage.Options{Config: e.Cluster.Config, Dir: dir, Log: logFile(e.Cluster.LogPath("provisioner"))})
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	e.provisionerStop, e.provisionerDone = cancel, make(chan struct{})
	go func() {
		defer close(e.provisionerDone)
		_ = p.Run(runCtx)
	}()
	fmt.Fprintf(e.opts.Progress, "volume provisioner started: claims of StorageClass %s (the default) get a directory under %s\n", devstorage.StorageClassName, dir)
	return nil
}

// StartController starts the controller process and waits until it is
// ready. Its log is appended to logs/controller.log.
func (e *Env) StartController(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.controller != nil {
		return errors.New("controller already running")
	}
	if e.metricsAddr == "" {
		e.metricsAddr, e.healthAddr = freeAddr(), freeAddr()
	}
	c, err := e.startController(ctx, "controller", e.metricsAddr, e.healthAddr, append([]string{"--leader-elect=false"}, e.opts.ControllerArgs...))
	if err != nil {
		return err
	}
	e.controller = c
	return nil
}

// StartReplica starts one more controller process, named name (its log is
// logs/<name>.log), with leader election on: the replicas of a production
// Deployment. Stop the default controller first (KillController), which
// runs without leader election. args are added to the controller's
// arguments (e.g. shorter --leader-elect-lease-duration).
func (e *Env) StartReplica(ctx context.Context, name string, args ...string) (*Controller, error) {
	return e.startController(ctx, name, freeAddr(), freeAddr(),
		append([]string{"--leader-elect", "--leader-election-namespace", install.Namespace}, args...))
}

func (e *Env) startController(ctx context.Context, name, metricsAddr, healthAddr string, extra []string) (*Controller, error) {
	start := time.Now()
	args := append([]string{"controller", "--kubeconfig", e.controllerConf,
		"--metrics-bind-address", metricsAddr, "--health-probe-bind-address", healthAddr}, extra...)
	cmd := exec.Command(e.opts.LullBinary, args...)
	logf, err := os.OpenFile(e.Cluster.LogPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, e.opts.LullBinary, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	c := &Controller{Name: name, MetricsAddr: metricsAddr, cmd: cmd, done: done}
	// /readyz answers before leader election is won: a standby replica is
	// ready too.
	if err := waitReady(ctx, "http://"+healthAddr+"/readyz", done); err != nil {
		c.Kill()
		return nil, fmt.Errorf("%s did not become ready (log: %s): %w", name, e.Cluster.LogPath(name), err)
	}
	fmt.Fprintf(e.opts.Progress, "lull %s ready, pid %d, metrics http://%s/metrics (%s)\n", name, cmd.Process.Pid, metricsAddr, since(start))
	return c, nil
}

// KillController kills the default controller with SIGKILL, as a crash
// would, and waits for it to exit.
func (e *Env) KillController() {
	e.mu.Lock()
	c := e.controller
	e.controller = nil
	e.mu.Unlock()
	if c != nil {
		c.Kill()
	}
}

// ControllerPID returns the default controller's process ID, or 0.
func (e *Env) ControllerPID() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.controller == nil {
		return 0
	}
	return e.controller.cmd.Process.Pid
}

// Controller is one controller process.
type Controller struct {
	// Name names the process and its log file.
	Name string
	// MetricsAddr serves its Prometheus metrics.
	MetricsAddr string

	cmd  *exec.Cmd
	done chan struct{}
}

// Kill kills the process with SIGKILL (continuing it first if it is
// stopped) and waits for it to exit.
func (c *Controller) Kill() { c.signal(syscall.SIGKILL) }

// Terminate asks the process to stop (SIGTERM) and waits up to 10 s before
// killing it.
func (c *Controller) Terminate() { c.signal(syscall.SIGTERM) }

func (c *Controller) signal(sig syscall.Signal) {
	_ = c.cmd.Process.Signal(sig)
	_ = c.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// Pause stops the process (SIGSTOP): it neither renews its leader lease
// nor notices that it lost it, as under a long GC pause or a frozen VM.
func (c *Controller) Pause() error { return c.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused process (SIGCONT).
func (c *Controller) Resume() error { return c.cmd.Process.Signal(syscall.SIGCONT) }

// Exited reports whether the process has exited.
func (c *Controller) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Leader reports whether the process holds the leader lease, from its
// leader_election_master_status metric.
func (c *Controller) Leader() (bool, error) {
	resp, err := http.Get("http://" + c.MetricsAddr + "/metrics")
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "leader_election_master_status{") {
			return strings.HasSuffix(strings.TrimSpace(line), " 1"), nil
		}
	}
	return false, nil
}

// MetricsURL is the controller's Prometheus endpoint.
func (e *Env) MetricsURL() string { return "http://" + e.metricsAddr + "/metrics" }

// Down stops the pod runner (and every runtime), the provisioner, the
// controller and the cluster. Volumes stay in <StateDir>/volumes.
func (e *Env) Down() error {
	if e.runnerStop != nil {
		e.runnerStop()
		<-e.runnerDone
	}
	if e.provisionerStop != nil {
		e.provisionerStop()
		<-e.provisionerDone
	}
	e.mu.Lock()
	c := e.controller
	e.controller = nil
	e.mu.Unlock()
	if c != nil {
		c.Terminate()
	}
	return e.Cluster.Stop()
}

// serviceAccountKubeconfig creates a ServiceAccount's token through the
// TokenRequest API and writes a kubeconfig that uses it.
func (e *Env) serviceAccountKubeconfig(ctx context.Context, ns, sa string) (string, error) {
	cs, err := kubernetes.NewForConfig(e.Cluster.Config)
	if err != nil {
		return "", err
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](48 * 3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for %s/%s: %w", ns, sa, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["dev"] = &clientcmdapi.Cluster{Server: e.Cluster.Server, CertificateAuthority: e.Cluster.CAFile}
	cfg.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["dev"] = &clientcmdapi.Context{Cluster: "dev", AuthInfo: sa, Namespace: ns}
	cfg.CurrentContext = "dev"
	path := filepath.Join(e.Cluster.StateDir, sa+".kubeconfig")
	return path, clientcmd.WriteToFile(*cfg, path)
}

func waitReady(ctx context.Context, url string, exited <-chan struct{}) error {
	deadline := time.After(60 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-exited:
			return errors.New("process exited")
		case <-deadline:
			return fmt.Errorf("%s not ready after 60s", url)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

func logFile(path string) io.Writer {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return io.Discard
	}
	return f
}

func since(t time.Time) string { return time.Since(t).Round(10 * time.Millisecond).String() }
