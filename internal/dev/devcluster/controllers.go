package devcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"

	"net/http"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// startControllerManager starts kube-controller-manager and waits for its
// /healthz and for the default ServiceAccount it creates (pods cannot be
// created in a namespace before that).
func (c *Cluster) startControllerManager(ctx context.Context, client kubernetes.Interface) error {
	cc := &c.certs
	kubeconfig := cc.kcmKubeconfig
	return c.startSecureComponent(ctx, ComponentControllerManager, c.Binaries.ControllerManager, cc.kcmServing, func(port int) []string {
		return append(componentArgs(kubeconfig, port, cc.kcmServing),
			"--controllers=*,-nodeipam",
			"--use-service-account-credentials",
			"--root-ca-file="+c.CAFile,
			"--service-account-private-key-file="+cc.saKeyFile,
			"--cluster-signing-cert-file="+c.CAFile,
			"--cluster-signing-key-file="+c.pki.CAKeyFile(),
			"--service-cluster-ip-range="+serviceCIDR,
			"--kube-api-qps=100",
			"--kube-api-burst=200",
		)
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
		return componentArgs(kubeconfig, port, cc.schedServing)
	}, nil)
}

// componentArgs are the flags kube-controller-manager and kube-scheduler
// share: their kubeconfig for the API and for delegated authn/authz, a
// /healthz served over TLS on a loopback port, no leader election.
func componentArgs(kubeconfig string, port int, serving certFiles) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=" + loopbackHost,
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + serving.CertFile,
		"--tls-private-key-file=" + serving.KeyFile,
		"--leader-elect=false",
	}
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
				c.discard(p)
				c.progress("%s lost a port race, restarting on new ports", t, name)
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
