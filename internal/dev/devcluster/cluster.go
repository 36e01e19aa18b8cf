package devcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Component names. Each is also the base name of the component's log file
// under <StateDir>/logs.
const (
	ComponentEtcd              = "etcd"
	ComponentAPIServer         = "kube-apiserver"
	ComponentControllerManager = "kube-controller-manager"
	ComponentScheduler         = "kube-scheduler"
	ComponentKwok              = "kwok"
)

// Options configures Start.
type Options struct {
	// StateDir holds certificates, kubeconfigs, logs and etcd's data; it is
	// created if missing. Default: a new directory under os.TempDir() named
	// lull-dev-*. Start always begins with an empty etcd. One cluster at a
	// time may use a directory: Start holds an exclusive lock on
	// <StateDir>/lock until Stop.
	StateDir string
	// Progress receives one human line per startup step, with its
	// duration. May be nil.
	Progress io.Writer
	// NodeName names the simulated node. Default "kwok-node-0".
	NodeName string
	// RemoveStateDir makes Stop delete StateDir (logs included) once every
	// process has exited.
	RemoveStateDir bool
	// RealNode adds a real node beside the simulated one: containerd, runc
	// and the kubelet on this machine (docs/real-node.md). It needs Linux,
	// root and the packages CheckRealNodeHost names; one runs per machine
	// at a time (else Start fails with ErrRealNodeInUse, naming the
	// holder). Pods reach it only if they tolerate RealNodeTaint.
	RealNode bool
	// NodeImages are imported into the real node's containerd before the
	// kubelet starts; PauseImage (one of their references) is its sandbox
	// image. Both only with RealNode.
	NodeImages []NodeImage
	PauseImage string
}

// Cluster is a running local control plane. Stop it when done.
type Cluster struct {
	// StateDir is where certificates, kubeconfigs, logs and etcd data live.
	StateDir string
	// Kubeconfig is the path of an admin kubeconfig (user lull-admin in
	// group system:masters, credentials embedded).
	Kubeconfig string
	// Config is the admin client configuration.
	Config *rest.Config
	// Server is the apiserver URL, https://127.0.0.1:PORT.
	Server string
	// CAFile is the cluster CA certificate; it signed the apiserver's
	// serving certificate and every client certificate.
	CAFile string
	// NodeName is the simulated node Start registers, the one pods are
	// scheduled on unless a test adds others (AddNode).
	NodeName string
	// RealNodeName is the real node (this machine's hostname) with
	// Options.RealNode, else empty.
	RealNodeName string
	// EtcdURL is etcd's client URL, http://127.0.0.1:PORT.
	EtcdURL string
	// Binaries are the executables the cluster runs.
	Binaries Binaries

	opts  Options
	pki   *pki
	certs clusterCerts
	lock  *os.File  // the flock on <StateDir>/lock, held until Stop
	real  *realNode // with Options.RealNode

	mu    sync.Mutex
	procs []*process // in start order

	progressMu sync.Mutex
	stopping   atomic.Bool
	stopOnce   sync.Once
	stopErr    error
}

// StartError is returned by Start: it names the step that failed and the
// log file of the component involved, if any.
type StartError struct {
	Step string // e.g. "kube-apiserver"
	Log  string // path of the component's log file, or ""
	Err  error
}

func (e *StartError) Error() string {
	msg := fmt.Sprintf("devcluster: start %s: %v", e.Step, e.Err)
	if e.Log != "" {
		msg += "\n  log: " + e.Log
		if tail := logTail(e.Log, 10); tail != "" {
			msg += "\n  last lines:\n" + tail
		}
	}
	return msg
}

func (e *StartError) Unwrap() error { return e.Err }

// Start starts etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok, registers one simulated node and waits until it
// is Ready and schedulable; with Options.RealNode, it also removes what a
// crashed real node left, starts the real node and waits until it is
// Ready. On failure it stops everything it started and
// returns a *StartError (or FindBinaries' error). If another cluster holds
// the state directory, it fails at once, touching nothing, with an error
// that matches ErrStateDirInUse and names the holder's process ID. The
// processes outlive ctx: ctx only bounds startup; call Stop.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	began := time.Now()
	bins, err := FindBinaries()
	if err != nil {
		return nil, err
	}
	if opts.NodeName == "" {
		opts.NodeName = "kwok-node-0"
	}
	dir, err := prepareStateDir(opts.StateDir)
	if err != nil {
		return nil, &StartError{Step: "state directory", Err: err}
	}
	lock, err := lockStateDir(dir)
	if errors.Is(err, ErrStateDirInUse) {
		return nil, err
	} else if err != nil {
		return nil, &StartError{Step: "state directory", Err: err}
	}
	c := &Cluster{StateDir: dir, NodeName: opts.NodeName, Binaries: bins, opts: opts, lock: lock}
	defer func() {
		if err != nil {
			c.opts.RemoveStateDir = false // keep the logs the error points at
			c.Stop()
		}
	}()
	if opts.RealNode {
		if opts.PauseImage == "" {
			return nil, &StartError{Step: "real node", Err: errors.New("Options.PauseImage is empty: the real node's containerd needs a sandbox image")}
		}
		if err := c.prepareRealNode(); err != nil {
			return nil, err
		}
	}

	t := time.Now()
	if err := c.makeCerts(); err != nil {
		return nil, &StartError{Step: "certificates", Err: err}
	}
	c.progress("certificates and keys generated in %s", t, filepath.Join(dir, "pki"))

	if err := c.startEtcd(ctx); err != nil {
		return nil, err
	}
	if err := c.startAPIServer(ctx); err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return nil, &StartError{Step: "client", Err: err}
	}

	// The rest only needs the apiserver: start it all at once.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	wg.Go(func() { errs[0] = c.startControllerManager(ctx, client) })
	wg.Go(func() { errs[1] = c.startScheduler(ctx) })
	wg.Go(func() { errs[2] = c.startKwokAndNode(ctx, client) })
	if opts.RealNode {
		wg.Go(func() { errs[3] = c.startRealNode(ctx, client) })
	}
	wg.Wait()
	for _, e := range errs {
		if e != nil {
			return nil, e
		}
	}
	c.progress("control plane ready; kubeconfig %s", began, c.Kubeconfig)
	return c, nil
}

// prepareStateDir creates dir (or a new temporary one) with its logs
// subdirectory and returns its absolute path.
func prepareStateDir(dir string) (string, error) {
	var err error
	if dir == "" {
		dir, err = os.MkdirTemp("", "lull-dev-*")
	} else {
		err = os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		return "", err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return "", err
	}
	for _, sub := range []string{"logs", "pki"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// LogPath returns the log file of a component (see the Component constants).
func (c *Cluster) LogPath(component string) string {
	return filepath.Join(c.StateDir, "logs", component+".log")
}

// path returns a path inside StateDir.
func (c *Cluster) path(elem ...string) string {
	return filepath.Join(append([]string{c.StateDir}, elem...)...)
}

// progress writes one line: the message and the time since start.
func (c *Cluster) progress(format string, start time.Time, args ...any) {
	if c.opts.Progress == nil {
		return
	}
	c.progressMu.Lock()
	defer c.progressMu.Unlock()
	fmt.Fprintf(c.opts.Progress, format+" (%.1fs)\n", append(args, time.Since(start).Seconds())...)
}

// run starts a component's process and records it for Stop.
func (c *Cluster) run(component, bin string, args []string) (*process, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopping.Load() {
		return nil, errors.New("cluster is stopping")
	}
	p, err := startProcess(component, c.LogPath(component), bin, args)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return p, nil
}

// discard stops p and forgets it: a start attempt that lost a port race.
func (c *Cluster) discard(p *process) {
	p.stop(stopGrace)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.procs = slices.DeleteFunc(c.procs, func(q *process) bool { return q == p })
}

// Healthy returns an error naming every component that has exited; nil
// while all run.
func (c *Cluster) Healthy() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, p := range c.procs {
		if err := p.exitErr(); err != nil {
			errs = append(errs, fmt.Errorf("%w (log: %s)", err, p.logPath))
		}
	}
	return errors.Join(errs...)
}

// stopTier orders shutdown: the kubelet first (so it restarts no
// container), then the other clients of the apiserver and containerd, then
// the apiserver, then etcd, so no component waits on one already gone.
func stopTier(component string) int {
	switch component {
	case ComponentEtcd:
		return 0
	case ComponentAPIServer:
		return 1
	case ComponentKubelet:
		return 3
	default:
		return 2
	}
}

// Stop stops every process the cluster started (SIGTERM to its process
// group, SIGKILL after a few seconds), waits for them and releases the
// state directory's lock. It reports
// components that had already exited on their own. Stop is idempotent and
// safe to call concurrently.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		c.stopping.Store(true)
		c.mu.Lock()
		procs := append([]*process(nil), c.procs...)
		c.mu.Unlock()
		var (
			errMu sync.Mutex
			errs  []error
		)
		for tier := 3; tier >= 0; tier-- {
			var wg sync.WaitGroup
			for _, p := range procs {
				if stopTier(p.name) != tier {
					continue
				}
				wg.Go(func() {
					crashed, err := p.stop(stopGrace)
					errMu.Lock()
					defer errMu.Unlock()
					if crashed != nil {
						errs = append(errs, fmt.Errorf("%w before Stop (log: %s)", crashed, p.logPath))
					}
					if err != nil {
						errs = append(errs, err)
					}
				})
			}
			wg.Wait()
		}
		// The pods' processes, mounts, cgroups and links, before the
		// state directory they may hold files of.
		if err := c.stopRealNode(); err != nil {
			errs = append(errs, err)
		}
		// Remove before unlocking: a cluster waiting for the directory
		// must never find it half deleted.
		if c.opts.RemoveStateDir {
			if err := os.RemoveAll(c.StateDir); err != nil {
				errs = append(errs, err)
			}
		}
		if c.lock != nil {
			c.lock.Close() // releases the flock
		}
		if len(errs) > 0 {
			c.stopErr = fmt.Errorf("devcluster: stop: %w", errors.Join(errs...))
		}
	})
	return c.stopErr
}

// StopControllerManager stops kube-controller-manager, so a test can
// observe objects its controllers have not yet acted on (a StatefulSet
// with no status, no pods). StartControllerManager starts it again.
func (c *Cluster) StopControllerManager() error {
	c.mu.Lock()
	var found *process
	for _, p := range c.procs {
		if p.name == ComponentControllerManager && p.exitErr() == nil {
			found = p
		}
	}
	c.mu.Unlock()
	if found == nil {
		return errors.New("devcluster: kube-controller-manager is not running")
	}
	c.discard(found)
	return nil
}

// StartControllerManager starts kube-controller-manager after
// StopControllerManager and waits until it is healthy.
func (c *Cluster) StartControllerManager(ctx context.Context) error {
	client, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	return c.startControllerManager(ctx, client)
}
