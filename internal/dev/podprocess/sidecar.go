package podprocess

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/agent"
)

// listenWait bounds how long the runner waits for the agent sidecar to
// accept connections before it gives the start up (and retries it).
const listenWait = 10 * time.Second

// maxSocketPath is the longest path a unix socket can be bound to on Linux
// (sun_path holds 108 bytes with the terminating NUL).
const maxSocketPath = 107

// agentSidecar returns pod's injected agent sidecar: the init container
// named lullv1.AgentContainerName with restartPolicy Always; nil if the pod
// has none.
func agentSidecar(pod *corev1.Pod) *corev1.Container {
	for i, c := range pod.Spec.InitContainers {
		if c.Name == lullv1.AgentContainerName && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			return &pod.Spec.InitContainers[i]
		}
	}
	return nil
}

// startContainers starts p's processes in a kubelet's order: the agent
// sidecar first, if p has one, and the runtime once the agent accepts
// connections; then a supervisor for each. On error whatever it started
// is still running; the caller stops it.
func (r *Runner) startContainers(ctx context.Context, p *proc) error {
	if a := p.agent; a != nil {
		network, addr := listenAddress(a.args)
		if network == "unix" && len(addr) > maxSocketPath {
			return fmt.Errorf("agent socket %s is %d bytes long, more than a unix socket path can be (%d): use a shorter state directory", addr, len(addr), maxSocketPath)
		}
		if err := r.launchLocked(p, a); err != nil {
			return err
		}
		if err := r.waitListening(ctx, p, a, network, addr); err != nil {
			return err
		}
	}
	if err := r.launchLocked(p, p.runtime); err != nil {
		return err
	}
	for _, c := range p.containers() {
		r.wg.Add(1)
		go r.supervise(ctx, p, c)
	}
	return nil
}

// waitListening waits until a's process accepts connections on addr, for
// at most r.listenWait. It fails early if the process exits or p is
// stopped.
func (r *Runner) waitListening(ctx context.Context, p *proc, a *container, network, addr string) error {
	r.mu.Lock()
	cur := a.cur
	r.mu.Unlock()
	deadline := time.After(r.listenWait)
	for {
		if conn, err := net.DialTimeout(network, addr, 200*time.Millisecond); err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-cur.done:
			return fmt.Errorf("agent sidecar exited (%s) before listening on %s: %s", exitText(cur.err), addr, logTail(a.log, 2))
		case <-p.quit:
			return errors.New("pod is stopping")
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("agent sidecar not listening on %s after %s (log %s)", addr, r.listenWait, a.log)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// listenAddress returns where an agent run with args listens, as the agent
// reads its --listen flag: ("unix", path) for unix:///path, else ("tcp",
// host:port); agent.DefaultListen without the flag.
func listenAddress(args []string) (network, addr string) {
	addr = agent.DefaultListen
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--listen="); ok {
			addr = v
		} else if a == "--listen" && i+1 < len(args) {
			addr = args[i+1]
		}
	}
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		return "unix", path
	}
	return "tcp", addr
}
