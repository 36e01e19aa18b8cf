// Package localenv is lull running on the local control plane: the cluster
// from package devcluster with lull installed, the controller as its own
// process authenticated as its ServiceAccount (so its generated RBAC is what
// is exercised), and the pod runner that starts a runtime process for every
// running session pod. `lull dev`, the demo, the end-to-end tests and the
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
	"strconv"
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

	"lull.dev/lull/internal/devcluster"
	"lull.dev/lull/internal/install"
	"lull.dev/lull/internal/podprocess"
)

// Options configure Up.
type Options struct {
	// StateDir holds everything the environment writes; empty means a new
	// directory under the system temp dir.
	StateDir string
	// Progress receives one line per startup step; may be nil.
	Progress io.Writer
	// LullBinary is the lull executable that runs the controller and the
	// reference runtimes; empty means this process's own executable.
	LullBinary string
	// RuntimeArgs are added to every reference runtime's arguments, after
	// the container's own.
	RuntimeArgs []string
	// ControllerArgs are added to the controller's arguments.
	ControllerArgs []string
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
	controller *exec.Cmd
	ctrlDone   chan struct{}

	runnerStop context.CancelFunc
	runnerDone chan struct{}
}

// Up starts the control plane, installs lull, starts the controller and the
// pod runner. On any failure it stops what it started.
func Up(ctx context.Context, opts Options) (_ *Env, err error) {
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if opts.LullBinary == "" {
		if opts.LullBinary, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	cl, err := devcluster.Start(ctx, devcluster.Options{StateDir: opts.StateDir, Progress: opts.Progress})
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
			args := append([]string{"example-runtime"}, c.Args...)
			return opts.LullBinary, append(args, opts.RuntimeArgs...)
		},
		Log: logFile(filepath.Join(cl.StateDir, "logs", "pod-runner.log")),
	})
	if err != nil {
		return nil, err
	}
	e.Runner = runner
	runCtx, cancel := context.WithCancel(context.Background())
	e.runnerStop, e.runnerDone = cancel, make(chan struct{})
	go func() {
		defer close(e.runnerDone)
		_ = runner.Run(runCtx)
	}()
	fmt.Fprintf(opts.Progress, "pod runner started: each running session pod gets a runtime process\n")
	return e, nil
}

// StartController starts the controller process and waits until it is
// ready. Its log is appended to logs/controller.log.
func (e *Env) StartController(ctx context.Context) error {
	start := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.controller != nil {
		return errors.New("controller already running")
	}
	if e.metricsAddr == "" {
		e.metricsAddr, e.healthAddr = freeAddr(), freeAddr()
	}
	args := append([]string{"controller", "--kubeconfig", e.controllerConf, "--leader-elect=false",
		"--metrics-bind-address", e.metricsAddr, "--health-probe-bind-address", e.healthAddr}, e.opts.ControllerArgs...)
	cmd := exec.Command(e.opts.LullBinary, args...)
	logf, err := os.OpenFile(e.Cluster.LogPath("controller"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start controller (%s): %w", e.opts.LullBinary, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	e.controller, e.ctrlDone = cmd, done
	if err := waitReady(ctx, "http://"+e.healthAddr+"/readyz", done); err != nil {
		return fmt.Errorf("controller did not become ready (log: %s): %w", e.Cluster.LogPath("controller"), err)
	}
	fmt.Fprintf(e.opts.Progress, "lull controller ready, pid %d, metrics http://%s/metrics (%s)\n", cmd.Process.Pid, e.metricsAddr, since(start))
	return nil
}

// KillController kills the controller with SIGKILL, as a crash would, and
// waits for it to exit.
func (e *Env) KillController() { e.stopController(syscall.SIGKILL) }

func (e *Env) stopController(sig syscall.Signal) {
	e.mu.Lock()
	cmd, done := e.controller, e.ctrlDone
	e.controller = nil
	e.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// ControllerPID returns the controller's process ID, or 0.
func (e *Env) ControllerPID() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.controller == nil {
		return 0
	}
	return e.controller.Process.Pid
}

// MetricsURL is the controller's Prometheus endpoint.
func (e *Env) MetricsURL() string { return "http://" + e.metricsAddr + "/metrics" }

// Down stops the pod runner (and every runtime), the controller and the
// cluster.
func (e *Env) Down() error {
	if e.runnerStop != nil {
		e.runnerStop()
		<-e.runnerDone
	}
	e.stopController(syscall.SIGTERM)
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
