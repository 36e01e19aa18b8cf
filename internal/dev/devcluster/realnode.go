package devcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The real node's components, with a log file each under <StateDir>/logs.
const (
	ComponentContainerd = "containerd"
	ComponentKubelet    = "kubelet"
)

// NodeImage is an image the real node's containerd gets from a local
// tarball (no registry is reachable here): `ctr -n k8s.io images import`.
type NodeImage struct {
	// Tarball is a `docker save` or OCI archive holding Ref.
	Tarball string
	// Ref is the image's reference in the archive, e.g.
	// ghcr.io/lull-dev/lull-agent:v0.1.0.
	Ref string
	// Aliases are more references the same image gets (ctr images tag),
	// e.g. a v2 of a runtime for a rollout to change the image to.
	Aliases []string
}

// hostCommands are what the real node needs installed on the machine, and
// the package each comes from.
var hostCommands = []struct{ path, pkg string }{
	{"containerd", "containerd"},
	{"ctr", "containerd"},
	{"runc", "runc"},
	{filepath.Join(cniBinDir, "bridge"), "containernetworking-plugins"},
	{filepath.Join(cniBinDir, "host-local"), "containernetworking-plugins"},
	{filepath.Join(cniBinDir, "loopback"), "containernetworking-plugins"},
}

// RealNodeInstall is the command that installs what the real node needs
// from the machine's packages.
const RealNodeInstall = "apt-get install -y containerd runc containernetworking-plugins"

// ErrRealNodeRefused is matched by the errors that refuse a real node
// before anything of the machine is changed: the machine cannot run it
// (CheckRealNodeHost), its name does not resolve, or host paths the
// clean-up would remove are not a lull real node's. A caller may remove
// what it prepared for the run (lull dev, its temporary state directory):
// there are no logs to keep.
var ErrRealNodeRefused = errors.New("the real node was refused before it changed anything")

// refusal marks err as an ErrRealNodeRefused.
type refusal struct{ error }

func (r refusal) Unwrap() []error { return []error{r.error, ErrRealNodeRefused} }

// RealNodeAsRoot is the command line that runs lull dev's real node as
// root: sudo keeps the user's environment (the kubelet is in their cache)
// but resets PATH, where go must be found (the node's images are built
// from source at start).
const RealNodeAsRoot = `sudo -E env "PATH=$PATH" bin/lull dev --real-node`

// CheckRealNodeHost returns nil if this machine can run the real node:
// Linux, root, cgroup hierarchies under /sys/fs/cgroup, containerd, runc
// and the CNI plugins installed, and the kubelet in the cache. Otherwise
// its error, matching ErrRealNodeRefused, says what is missing and the one
// command that fixes it.
func CheckRealNodeHost() error {
	return checkRealNodeHost(realNodeHost{
		goos: runtime.GOOS,
		euid: os.Geteuid(),
		cgroups: func() error {
			_, err := os.Stat(filepath.Join(cgroupRoot, "memory"))
			if err != nil {
				if _, err2 := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err2 == nil {
					return nil
				}
			}
			return err
		},
		lookPath: exec.LookPath,
		kubelet:  func() error { return checkRuns(binariesIn(CacheDir()).Kubelet) },
	})
}

// realNodeHost is what CheckRealNodeHost looks at, each fact asked in
// order so that a later one is not asked once an earlier one refuses.
type realNodeHost struct {
	goos     string
	euid     int
	cgroups  func() error                 // nil if hierarchies are mounted under cgroupRoot
	lookPath func(string) (string, error) // exec.LookPath
	kubelet  func() error                 // nil if the cached kubelet runs
}

// checkRealNodeHost is CheckRealNodeHost's decision: the first thing this
// machine lacks, named with the one command that fixes it.
func checkRealNodeHost(h realNodeHost) error {
	if h.goos != "linux" {
		return refusal{fmt.Errorf("devcluster: the real node runs on Linux only (this is %s): run lull dev without --real-node", h.goos)}
	}
	if h.euid != 0 {
		return refusal{fmt.Errorf("devcluster: the real node needs root (containerd, runc and the kubelet mount file systems, create cgroups and network links), and this runs as uid %d: run it as root with your environment, `%s` (the same prefix before `make demo-real-node` or `make test`), or without --real-node", h.euid, RealNodeAsRoot)}
	}
	if err := h.cgroups(); err != nil {
		return refusal{fmt.Errorf("devcluster: the real node needs cgroups mounted under %s (%w): mount them (`mount -t cgroup2 none %s`) or run lull dev without --real-node", cgroupRoot, err, cgroupRoot)}
	}
	var missing []string
	for _, c := range hostCommands {
		if _, err := h.lookPath(c.path); err != nil {
			missing = append(missing, c.path+" ("+c.pkg+")")
		}
	}
	if len(missing) > 0 {
		return refusal{fmt.Errorf("devcluster: the real node needs %s, not found: run `%s` (make test does when run as root)", strings.Join(missing, ", "), RealNodeInstall)}
	}
	if err := h.kubelet(); err != nil {
		return refusal{fmt.Errorf("devcluster: the real node's kubelet is not usable (run `make tools`, which builds it into %s): %w", CacheDir(), err)}
	}
	return nil
}

// realNode is the running real node's state beside its processes.
type realNode struct {
	name    string
	paths   nodePaths
	lock    *machineLock
	forward *serviceForward
}

// prepareRealNode checks the machine, takes the machine lock and removes
// what a crashed real node left. Called before anything starts.
func (c *Cluster) prepareRealNode() error {
	t := time.Now()
	if err := CheckRealNodeHost(); err != nil {
		return err
	}
	name, err := nodeName()
	if err != nil {
		return &StartError{Step: "real node", Err: refusal{err}}
	}
	// Refused before c.real is set: Stop must not clean up what is not
	// the real node's.
	var foreign error
	lock, prev, err := lockMachine(c.StateDir, func(prev machineHolder) error {
		foreign = checkNotForeign(prev, machinePaths)
		return foreign
	})
	if foreign != nil {
		return &StartError{Step: "real node", Err: refusal{foreign}}
	}
	if err != nil {
		return err
	}
	c.real = &realNode{name: name, paths: newNodePaths(c.StateDir), lock: lock}
	c.RealNodeName = name
	prevDir := ""
	if prev.StateDir != "" {
		prevDir = newNodePaths(prev.StateDir).dir
	}
	left, err := findLeftovers(prevDir)
	if err != nil {
		return &StartError{Step: "real node leftovers", Err: err}
	}
	if !left.empty() {
		if err := removeLeftovers(left); err != nil {
			return &StartError{Step: "real node leftovers", Err: leftoversNotRemoved(prev, left, err)}
		}
		c.progress("%s", t, leftoversRemoved(prev, left))
	}
	return nil
}

// earlierRun names the run a machine lock record is of.
func earlierRun(prev machineHolder) string {
	pid, dir := prev.PID, prev.StateDir
	if pid == "" {
		pid = "unknown"
	}
	if dir == "" {
		dir = "unknown"
	}
	return fmt.Sprintf("the real node of an earlier run (pid %s, state dir %s)", pid, dir)
}

// leftoversRemoved is the progress line of a start that removed what a
// crashed real node left: nothing for the user to do.
func leftoversRemoved(prev machineHolder, left hostLeftovers) string {
	return fmt.Sprintf("removed what %s left: %s", earlierRun(prev), left)
}

// leftoversNotRemoved is the error of a start that could not remove what
// a crashed real node left: what, why, and that the next start tries
// again once what holds them (a process outside the node, a shell in a
// mounted directory) is gone.
func leftoversNotRemoved(prev machineHolder, left hostLeftovers, err error) error {
	return fmt.Errorf("%s left %s; removing them failed: %w; stop what still holds them (a process started outside the node, a shell in a directory under them), then start again: each start removes them (`%s`)", earlierRun(prev), left, err, RealNodeAsRoot)
}

// hostPaths are the machine's paths checkNotForeign looks at.
type hostPaths struct {
	systemSocket, nodeSocket, kubeletRoot string
}

// machinePaths are this machine's.
var machinePaths = hostPaths{systemSocket: "/run/containerd/containerd.sock", nodeSocket: containerdSocket(), kubeletRoot: kubeletRoot}

// checkNotForeign refuses to run the real node where host paths it would
// clean up belong to something else: a containerd of the machine's own,
// or a kubelet's root or the node's containerd socket when no lull real
// node ran since boot (prev, the lock's record, is empty).
func checkNotForeign(prev machineHolder, p hostPaths) error {
	if _, err := os.Stat(p.systemSocket); err == nil {
		return fmt.Errorf("%s exists: the machine runs its own containerd, whose shims share /run/containerd with the real node's; stop it (systemctl stop containerd) or start without --real-node", p.systemSocket)
	}
	if prev.StateDir != "" {
		return nil
	}
	if _, err := os.Stat(p.nodeSocket); err == nil {
		return fmt.Errorf("%s exists but no lull real node ran on this machine since boot (%s has no record): another containerd's? lull dev does not touch it; stop that containerd, or if it is a leftover, remove it (rm -rf %s) and start again", p.nodeSocket, machineLockPath, filepath.Dir(p.nodeSocket))
	}
	if _, err := os.Stat(p.kubeletRoot); err == nil {
		return fmt.Errorf("%s exists but no lull real node ran on this machine since boot (%s has no record): another kubelet's? lull dev does not touch it; if it is a leftover, remove it (rm -rf %s) and start again", p.kubeletRoot, machineLockPath, p.kubeletRoot)
	}
	return nil
}

// nodeName is this machine's hostname, which the real node registers as:
// it must resolve, since the API server dials it for logs and exec.
func nodeName() (string, error) {
	name, err := os.Hostname()
	if err != nil {
		return "", err
	}
	return resolvableNodeName(name, net.LookupHost)
}

// resolvableNodeName is nodeName's decision: the hostname, lower-cased,
// if lookup resolves it; otherwise an error naming the /etc/hosts line
// that fixes it.
func resolvableNodeName(hostname string, lookup func(string) ([]string, error)) (string, error) {
	name := strings.ToLower(hostname)
	if _, err := lookup(name); err != nil {
		return "", fmt.Errorf("the real node is named after this machine (%q), which does not resolve: the API server dials it for logs and exec; add `127.0.0.1 %s` to /etc/hosts (echo '127.0.0.1 %s' >> /etc/hosts)", name, name, name)
	}
	return name, nil
}

// serviceForwardError explains a failure to listen on the kubernetes
// Service's address, the one fixed port the real node needs: every other
// port of the plane and the kubelet is a free one picked at start.
func serviceForwardError(err error) error {
	addr := net.JoinHostPort(serviceIP, "443")
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%w: pods reach the API server at the kubernetes Service's %s, and another program listens on port 443 (on every address, or this one): find it with `ss -ltnp 'sport = :443'` and stop it, or start without --real-node", err, addr)
	}
	return fmt.Errorf("listen on %s, the kubernetes Service's address the pods reach the API server at: %w", addr, err)
}

// startRealNode starts containerd, imports the images, starts the kubelet
// and waits until the node is Ready.
func (c *Cluster) startRealNode(ctx context.Context, client kubernetes.Interface) error {
	n := c.real
	p := n.paths
	t := time.Now()
	for _, d := range []string{p.dir, p.containerdRoot, p.containerdState, p.cniConfDir, p.podLogs, nodeRunDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return &StartError{Step: "real node", Err: err}
		}
	}
	nodeClient, err := c.pki.client("kubelet-client", "system:node:"+n.name, "system:nodes")
	if err != nil {
		return &StartError{Step: "real node certificates", Err: err}
	}
	serving, err := c.pki.serving("kubelet", []string{n.name, "localhost"}, []net.IP{net.ParseIP(loopbackHost)})
	if err != nil {
		return &StartError{Step: "real node certificates", Err: err}
	}
	if err := writeKubeconfig(p.kubeletKubecfg, c.Server, c.pki.caPEM, nodeClient); err != nil {
		return &StartError{Step: "real node", Err: err}
	}
	if err := os.WriteFile(p.containerdConf, []byte(containerdConfig(p, c.opts.PauseImage)), 0o644); err != nil {
		return &StartError{Step: "real node", Err: err}
	}
	if err := os.WriteFile(filepath.Join(p.cniConfDir, "10-"+nodeCNIName+".conflist"), []byte(cniConfig()), 0o644); err != nil {
		return &StartError{Step: "real node", Err: err}
	}

	if err := addServiceAddress(); err != nil {
		return &StartError{Step: "service forward", Err: err}
	}
	u, err := url.Parse(c.Server)
	if err != nil {
		return &StartError{Step: "service forward", Err: err}
	}
	if n.forward, err = listenServiceForward(u.Host); err != nil {
		return &StartError{Step: "service forward", Err: serviceForwardError(err)}
	}

	cd, err := c.run(ComponentContainerd, "containerd", []string{"--config", p.containerdConf})
	if err != nil {
		return &StartError{Step: ComponentContainerd, Log: c.LogPath(ComponentContainerd), Err: err}
	}
	if err := waitReady(ctx, cd, readyTimeout, func(ctx context.Context) error {
		_, err := c.Ctr(ctx, "version")
		return err
	}); err != nil {
		return &StartError{Step: ComponentContainerd, Log: c.LogPath(ComponentContainerd), Err: err}
	}
	c.progress("containerd ready on %s", t, containerdSocket())

	t = time.Now()
	for _, im := range c.opts.NodeImages {
		if err := c.importImage(ctx, im); err != nil {
			return &StartError{Step: "real node images", Log: c.LogPath(ComponentContainerd), Err: err}
		}
	}
	if len(c.opts.NodeImages) > 0 {
		c.progress("%d images imported into the real node's containerd", t, len(c.opts.NodeImages))
	}

	t = time.Now()
	ports, err := freePorts(2)
	if err != nil {
		return &StartError{Step: ComponentKubelet, Err: err}
	}
	conf := kubeletConfig(kubeletSettings{CAFile: c.CAFile, ServingCert: serving, Port: ports[0], HealthzPort: ports[1],
		PodLogsDir: p.podLogs, Socket: containerdSocket()})
	if err := os.WriteFile(p.kubeletConf, []byte(conf), 0o644); err != nil {
		return &StartError{Step: ComponentKubelet, Err: err}
	}
	kl, err := c.run(ComponentKubelet, c.Binaries.Kubelet, []string{
		"--config=" + p.kubeletConf,
		"--kubeconfig=" + p.kubeletKubecfg,
		"--hostname-override=" + n.name,
		"--node-labels=" + RealNodeLabel + "=true",
	})
	if err != nil {
		return &StartError{Step: ComponentKubelet, Log: c.LogPath(ComponentKubelet), Err: err}
	}
	healthz := "http://" + net.JoinHostPort(loopbackHost, strconv.Itoa(ports[1])) + "/healthz"
	err = waitReady(ctx, kl, 2*readyTimeout, func(ctx context.Context) error {
		if _, err := httpGet(ctx, http.DefaultClient, healthz); err != nil {
			return err
		}
		node, err := client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return nodeSchedulable(node)
	})
	if err != nil {
		return &StartError{Step: "real node " + n.name, Log: c.LogPath(ComponentKubelet), Err: err}
	}
	c.progress("real node %s Ready (kubelet %s, containerd, runc)", t, n.name, KubernetesVersion)
	return nil
}

// Ctr runs ctr against the real node's containerd in the k8s.io namespace
// (the CRI's) and returns its output; the error carries ctr's output.
func (c *Cluster) Ctr(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", containerdSocket(), "--namespace", "k8s.io"}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// importImage imports one tarball and tags its aliases; it checks that the
// archive held the reference it was said to.
func (c *Cluster) importImage(ctx context.Context, im NodeImage) error {
	if _, err := os.Stat(im.Tarball); err != nil {
		return imageMissing(im, err)
	}
	if out, err := c.Ctr(ctx, "images", "import", im.Tarball); err != nil {
		return importFailed(im, out, err, c.real.paths.containerdRoot)
	}
	list, err := c.Ctr(ctx, "images", "list", "--quiet")
	if err != nil {
		return err
	}
	if !strings.Contains("\n"+list, "\n"+im.Ref+"\n") {
		return imageNotInArchive(im, strings.Fields(list))
	}
	for _, a := range im.Aliases {
		if _, err := c.Ctr(ctx, "images", "tag", "--force", im.Ref, a); err != nil {
			return err
		}
	}
	return nil
}

// rebuildImages is how the real node's tarballs are made again: lull dev
// builds them from source into a new directory at every start.
const rebuildImages = "start again: lull dev --real-node builds the images from source at every start (`make images` builds lull's own alone, to see a build's error)"

// imageMissing: the tarball the node was given is not there.
func imageMissing(im NodeImage, err error) error {
	return fmt.Errorf("image %s: its tarball is missing (%w): %s", im.Ref, err, rebuildImages)
}

// importFailed explains a failed `ctr images import` from ctr's output:
// a full disk under containerd's root is named with that root; anything
// else (a truncated or corrupt archive) is fixed by building it again.
func importFailed(im NodeImage, ctrOut string, err error, containerdRoot string) error {
	msg := fmt.Sprintf("image %s: containerd did not import %s: %v", im.Ref, im.Tarball, err)
	if strings.Contains(ctrOut, "no space left on device") {
		return fmt.Errorf("%s; the file system of containerd's root %s is full: free space there (`df -h %s`), then start again", msg, containerdRoot, containerdRoot)
	}
	return fmt.Errorf("%s; the archive is built at start and may be truncated or corrupt: %s", msg, rebuildImages)
}

// imageNotInArchive: the tarball was imported but holds other references
// than the one the node's pods use, e.g. built with another version.
func imageNotInArchive(im NodeImage, held []string) error {
	return fmt.Errorf("image %s: %s does not hold it (containerd holds: %s): it was built with another registry or version than the node runs; %s", im.Ref, im.Tarball, strings.Join(held, ", "), rebuildImages)
}

// stopRealNode removes everything the node wrote outside the state
// directory (its processes are already stopped) and releases the machine
// lock: clearing its record if everything was removed, keeping it if
// anything may be left (the next start removes it).
func (c *Cluster) stopRealNode() error {
	n := c.real
	if n == nil {
		return nil
	}
	if n.forward != nil {
		n.forward.close()
	}
	var errs []error
	left, err := findLeftovers(n.paths.dir)
	if err != nil {
		errs = append(errs, err)
	}
	if err := removeLeftovers(left); err != nil {
		errs = append(errs, fmt.Errorf("real node clean-up: %w", err))
	}
	if n.lock != nil {
		if len(errs) == 0 {
			n.lock.Close()
		} else {
			n.lock.release()
		}
	}
	return errors.Join(errs...)
}

// RealNodeLeftovers describes what a real node has on this machine
// outside any state directory (its processes, mounts, paths, cgroups,
// links, the service IP on lo); empty when there is nothing. The lock
// file, whose record only says a node runs or may have left something,
// does not count.
func RealNodeLeftovers() (string, error) {
	l, err := findLeftovers("")
	if l.empty() {
		return "", err
	}
	return l.String(), err
}
