package devcluster

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
)

// startAPIServer starts kube-apiserver on a free port, writes the
// kubeconfigs that point at it and waits for /readyz.
func (c *Cluster) startAPIServer(ctx context.Context) error {
	logPath := c.LogPath(ComponentAPIServer)
	for attempt := 1; ; attempt++ {
		t := time.Now()
		ports, err := freePorts(1)
		if err != nil {
			return &StartError{Step: ComponentAPIServer, Err: err}
		}
		c.Server = fmt.Sprintf("https://%s:%d", loopbackHost, ports[0])
		if err := c.writeKubeconfigs(); err != nil {
			return &StartError{Step: "kubeconfigs", Err: err}
		}
		p, err := c.runAPIServer(ctx, ports[0])
		if err != nil {
			if p != nil && attempt < portAttempts && addrInUse(logPath) {
				c.discard(p)
				c.progress("%s lost a port race, restarting on new ports", t, ComponentAPIServer)
				continue
			}
			return &StartError{Step: ComponentAPIServer, Log: logPath, Err: err}
		}
		c.progress("kube-apiserver ready on %s", t, c.Server)
		return nil
	}
}

// RestartAPIServer stops kube-apiserver and starts it again on the same
// address, as a crash or an upgrade of the control plane would: every
// client's watches break and its requests fail until the new process
// answers /readyz, which RestartAPIServer waits for. etcd keeps the state.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	old, idx := c.running(ComponentAPIServer)
	if old == nil {
		return errors.New("devcluster: kube-apiserver is not running")
	}
	t := time.Now()
	old.stop(stopGrace)
	u, err := url.Parse(c.Server)
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return err
	}
	var p *process
	for attempt := 1; ; attempt++ {
		// The old process's listening socket may take a moment to close.
		if p, err = c.runAPIServer(ctx, port); err == nil {
			break
		}
		if p != nil {
			c.discard(p)
		}
		if attempt == portAttempts || ctx.Err() != nil {
			return &StartError{Step: ComponentAPIServer + " restart", Log: c.LogPath(ComponentAPIServer), Err: err}
		}
		time.Sleep(500 * time.Millisecond)
	}
	// Keep start order, so Stop stops the apiserver after its clients.
	c.mu.Lock()
	c.procs = slices.DeleteFunc(c.procs, func(q *process) bool { return q == old || q == p })
	c.procs = slices.Insert(c.procs, min(idx, len(c.procs)), p)
	c.mu.Unlock()
	c.progress("kube-apiserver restarted on %s", t, c.Server)
	// kube-scheduler v1.37 meets a restarted API server before its RBAC
	// bootstrap has finished: its watches are refused (Forbidden) and, on
	// this machine, it was seen to schedule nothing afterwards. A control
	// plane restart restarts it too; so does this one.
	if old, _ := c.running(ComponentScheduler); old != nil {
		c.discard(old)
	}
	return c.startScheduler(ctx)
}

// running returns the running process of a component and its index in
// start order, or nil and -1.
func (c *Cluster) running(component string) (*process, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	idx := slices.IndexFunc(c.procs, func(p *process) bool { return p.name == component && p.exitErr() == nil })
	if idx < 0 {
		return nil, -1
	}
	return c.procs[idx], idx
}

// runAPIServer starts kube-apiserver on port and waits for /readyz. It
// returns the process even when it did not become ready, so the caller can
// discard it.
func (c *Cluster) runAPIServer(ctx context.Context, port int) (*process, error) {
	cc := &c.certs
	p, err := c.run(ComponentAPIServer, c.Binaries.APIServer, []string{
		"--etcd-servers=" + c.EtcdURL,
		"--bind-address=" + loopbackHost,
		// The endpoint reconcilers refuse a loopback address; nothing in
		// the cluster can reach the apiserver through the kubernetes
		// Service anyway (no pod runs), so it gets no endpoints.
		"--advertise-address=" + loopbackHost,
		"--endpoint-reconciler-type=none",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + c.path(ComponentAPIServer),
		"--tls-cert-file=" + cc.apiServer.CertFile,
		"--tls-private-key-file=" + cc.apiServer.KeyFile,
		"--client-ca-file=" + c.CAFile,
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=" + saIssuer,
		"--service-account-key-file=" + cc.saPubFile,
		"--service-account-signing-key-file=" + cc.saKeyFile,
		"--service-cluster-ip-range=" + serviceCIDR,
		"--allow-privileged=true",
		// Request-header authentication for aggregated APIs; it also
		// gives the controller-manager and scheduler the CA bundle their
		// delegated authentication expects (else they log errors).
		"--requestheader-client-ca-file=" + c.CAFile,
		"--requestheader-allowed-names=" + frontProxyUser,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + cc.frontProxy.CertFile,
		"--proxy-client-key-file=" + cc.frontProxy.KeyFile,
		"--kubelet-client-certificate=" + cc.kubeletClient.CertFile,
		"--kubelet-client-key=" + cc.kubeletClient.KeyFile,
		"--kubelet-certificate-authority=" + c.CAFile,
	})
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return p, err
	}
	err = waitReady(ctx, p, readyTimeout, func(ctx context.Context) error {
		_, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	})
	return p, err
}

// writeKubeconfigs writes the admin, controller-manager and scheduler
// kubeconfigs for c.Server and sets c.Config.
func (c *Cluster) writeKubeconfigs() error {
	cc := &c.certs
	ca := c.pki.caPEM
	c.Kubeconfig = c.path("admin.kubeconfig")
	cc.kcmKubeconfig = c.path(ComponentControllerManager + ".kubeconfig")
	cc.schedKubeconfig = c.path(ComponentScheduler + ".kubeconfig")
	for path, id := range map[string]certFiles{
		c.Kubeconfig:       cc.admin,
		cc.kcmKubeconfig:   cc.kcmClient,
		cc.schedKubeconfig: cc.schedClient,
	} {
		if err := writeKubeconfig(path, c.Server, ca, id); err != nil {
			return err
		}
	}
	c.Config = restConfig(c.Server, ca, cc.admin)
	return nil
}
