package devcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Cluster-wide settings.
const (
	serviceCIDR   = "10.96.0.0/16"
	serviceIP     = "10.96.0.1" // the kubernetes Service, first of serviceCIDR
	saIssuer      = "https://kubernetes.default.svc.cluster.local"
	portAttempts  = 3 // starts of a component that lost a port race
	readyTimeout  = 60 * time.Second
	adminUser     = "lull-admin"
	mastersGroup  = "system:masters"
	kcmUser       = "system:kube-controller-manager"
	schedulerUser = "system:kube-scheduler"
	// frontProxyUser is the only client allowed to assert a user through
	// request headers (aggregated APIs).
	frontProxyUser = "front-proxy-client"
	loopbackHost   = "127.0.0.1"
)

// clusterCerts are the files makeCerts wrote.
type clusterCerts struct {
	apiServer, admin               certFiles
	kcmClient, kcmServing          certFiles
	schedClient, schedServing      certFiles
	frontProxy                     certFiles
	saKeyFile, saPubFile           string
	kcmKubeconfig, schedKubeconfig string
}

// makeCerts writes the CA, serving and client certificates and the service
// account key pair under StateDir/pki.
func (c *Cluster) makeCerts() error {
	p, err := newPKI(c.path("pki"))
	if err != nil {
		return err
	}
	c.pki, c.CAFile = p, p.CAFile()
	loopback := []net.IP{net.ParseIP(loopbackHost)}
	cc := &c.certs
	if cc.apiServer, err = p.serving(ComponentAPIServer,
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		append(loopback, net.ParseIP(serviceIP))); err != nil {
		return err
	}
	if cc.admin, err = p.client("admin", adminUser, mastersGroup); err != nil {
		return err
	}
	if cc.frontProxy, err = p.client("front-proxy-client", frontProxyUser); err != nil {
		return err
	}
	if cc.kcmClient, err = p.client(ComponentControllerManager+"-client", kcmUser); err != nil {
		return err
	}
	if cc.kcmServing, err = p.serving(ComponentControllerManager, []string{"localhost"}, loopback); err != nil {
		return err
	}
	if cc.schedClient, err = p.client(ComponentScheduler+"-client", schedulerUser); err != nil {
		return err
	}
	if cc.schedServing, err = p.serving(ComponentScheduler, []string{"localhost"}, loopback); err != nil {
		return err
	}
	cc.saKeyFile, cc.saPubFile, err = p.serviceAccountKeys()
	return err
}

// startEtcd starts etcd on two free ports with an empty data directory.
func (c *Cluster) startEtcd(ctx context.Context) error {
	logPath := c.LogPath(ComponentEtcd)
	dataDir := c.path("etcd")
	for attempt := 1; ; attempt++ {
		t := time.Now()
		if err := os.RemoveAll(dataDir); err != nil {
			return &StartError{Step: ComponentEtcd, Err: err}
		}
		ports, err := freePorts(2)
		if err != nil {
			return &StartError{Step: ComponentEtcd, Err: err}
		}
		client := fmt.Sprintf("http://%s:%d", loopbackHost, ports[0])
		peer := fmt.Sprintf("http://%s:%d", loopbackHost, ports[1])
		p, err := c.run(ComponentEtcd, c.Binaries.Etcd, []string{
			"--name=lull-dev",
			"--data-dir=" + dataDir,
			"--listen-client-urls=" + client,
			"--advertise-client-urls=" + client,
			"--listen-peer-urls=" + peer,
			"--initial-advertise-peer-urls=" + peer,
			"--initial-cluster=lull-dev=" + peer,
			"--initial-cluster-state=new",
			"--unsafe-no-fsync", // a throwaway dev cluster: speed over durability
			"--log-level=warn",
		})
		if err != nil {
			return &StartError{Step: ComponentEtcd, Log: logPath, Err: err}
		}
		err = waitReady(ctx, p, readyTimeout, func(ctx context.Context) error {
			body, err := httpGet(ctx, http.DefaultClient, client+"/health")
			if err == nil && !strings.Contains(body, `"health":"true"`) {
				err = fmt.Errorf("/health: %s", body)
			}
			return err
		})
		if err != nil {
			if retry := attempt < portAttempts && addrInUse(logPath); retry {
				p.stop(stopGrace)
				continue
			}
			return &StartError{Step: ComponentEtcd, Log: logPath, Err: err}
		}
		c.EtcdURL = client
		c.progress("etcd ready on %s", t, strings.TrimPrefix(client, "http://"))
		return nil
	}
}

// startAPIServer starts kube-apiserver on a free port, writes the
// kubeconfigs that point at it and waits for /readyz.
func (c *Cluster) startAPIServer(ctx context.Context) error {
	logPath := c.LogPath(ComponentAPIServer)
	cc := &c.certs
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
		p, err := c.run(ComponentAPIServer, c.Binaries.APIServer, []string{
			"--etcd-servers=" + c.EtcdURL,
			"--bind-address=" + loopbackHost,
			// The endpoint reconcilers refuse a loopback address; nothing in
			// the cluster can reach the apiserver through the kubernetes
			// Service anyway (no pod runs), so it gets no endpoints.
			"--advertise-address=" + loopbackHost,
			"--endpoint-reconciler-type=none",
			"--secure-port=" + strconv.Itoa(ports[0]),
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
		})
		if err != nil {
			return &StartError{Step: ComponentAPIServer, Log: logPath, Err: err}
		}
		client, err := kubernetes.NewForConfig(c.Config)
		if err != nil {
			return &StartError{Step: ComponentAPIServer, Err: err}
		}
		err = waitReady(ctx, p, readyTimeout, func(ctx context.Context) error {
			_, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			return err
		})
		if err != nil {
			if attempt < portAttempts && addrInUse(logPath) {
				p.stop(stopGrace)
				continue
			}
			return &StartError{Step: ComponentAPIServer, Log: logPath, Err: err}
		}
		c.progress("kube-apiserver ready on %s", t, c.Server)
		return nil
	}
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

// startControllerManager starts kube-controller-manager and waits for its
// /healthz and for the default ServiceAccount it creates (pods cannot be
// created in a namespace before that).
func (c *Cluster) startControllerManager(ctx context.Context, client kubernetes.Interface) error {
	cc := &c.certs
	kubeconfig := cc.kcmKubeconfig
	return c.startSecureComponent(ctx, ComponentControllerManager, c.Binaries.ControllerManager, cc.kcmServing, func(port int) []string {
		return []string{
			"--kubeconfig=" + kubeconfig,
			"--authentication-kubeconfig=" + kubeconfig,
			"--authorization-kubeconfig=" + kubeconfig,
			"--bind-address=" + loopbackHost,
			"--secure-port=" + strconv.Itoa(port),
			"--tls-cert-file=" + cc.kcmServing.CertFile,
			"--tls-private-key-file=" + cc.kcmServing.KeyFile,
			"--leader-elect=false",
			"--controllers=*,-nodeipam",
			"--use-service-account-credentials",
			"--root-ca-file=" + c.CAFile,
			"--service-account-private-key-file=" + cc.saKeyFile,
			"--cluster-signing-cert-file=" + c.CAFile,
			"--cluster-signing-key-file=" + c.pki.CAKeyFile(),
			"--service-cluster-ip-range=" + serviceCIDR,
			"--kube-api-qps=100",
			"--kube-api-burst=200",
		}
	}, func(ctx context.Context) error {
		_, err := client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("no default ServiceAccount yet")
		}
		return err
	})
}

// startScheduler starts kube-scheduler and waits for its /healthz.
func (c *Cluster) startScheduler(ctx context.Context) error {
	cc := &c.certs
	kubeconfig := cc.schedKubeconfig
	return c.startSecureComponent(ctx, ComponentScheduler, c.Binaries.Scheduler, cc.schedServing, func(port int) []string {
		return []string{
			"--kubeconfig=" + kubeconfig,
			"--authentication-kubeconfig=" + kubeconfig,
			"--authorization-kubeconfig=" + kubeconfig,
			"--bind-address=" + loopbackHost,
			"--secure-port=" + strconv.Itoa(port),
			"--tls-cert-file=" + cc.schedServing.CertFile,
			"--tls-private-key-file=" + cc.schedServing.KeyFile,
			"--leader-elect=false",
		}
	}, nil)
}

// startSecureComponent starts a component serving /healthz over HTTPS on a
// free port with a certificate from the cluster CA, waits until /healthz
// answers ok and then until extra (if any) succeeds.
func (c *Cluster) startSecureComponent(ctx context.Context, name, bin string, serving certFiles, args func(port int) []string, extra func(context.Context) error) error {
	logPath := c.LogPath(name)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.pki.caPEM)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer hc.CloseIdleConnections()
	for attempt := 1; ; attempt++ {
		t := time.Now()
		ports, err := freePorts(1)
		if err != nil {
			return &StartError{Step: name, Err: err}
		}
		p, err := c.run(name, bin, args(ports[0]))
		if err != nil {
			return &StartError{Step: name, Log: logPath, Err: err}
		}
		url := fmt.Sprintf("https://%s:%d/healthz", loopbackHost, ports[0])
		err = waitReady(ctx, p, readyTimeout, func(ctx context.Context) error {
			body, err := httpGet(ctx, hc, url)
			if err == nil && body != "ok" {
				err = fmt.Errorf("/healthz: %s", body)
			}
			return err
		})
		if err != nil {
			if attempt < portAttempts && addrInUse(logPath) {
				p.stop(stopGrace)
				continue
			}
			return &StartError{Step: name, Log: logPath, Err: err}
		}
		if extra != nil {
			if err := waitReady(ctx, p, readyTimeout, extra); err != nil {
				return &StartError{Step: name, Log: logPath, Err: err}
			}
		}
		c.progress("%s ready, healthz on %s:%d", t, name, loopbackHost, ports[0])
		return nil
	}
}

// httpGet returns the body of a 200 response.
func httpGet(ctx context.Context, hc *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return string(body), nil
}
