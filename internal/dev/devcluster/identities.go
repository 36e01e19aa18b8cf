package devcluster

import "net"

// Cluster-wide settings and identities.
const (
	serviceCIDR   = "10.96.0.0/16"
	serviceIP     = "10.96.0.1" // the kubernetes Service, first of serviceCIDR
	saIssuer      = "https://kubernetes.default.svc.cluster.local"
	adminUser     = "lull-admin"
	mastersGroup  = "system:masters"
	kcmUser       = "system:kube-controller-manager"
	schedulerUser = "system:kube-scheduler"
	// kubeletClientUser is the API server's user towards kubelets.
	kubeletClientUser = "kube-apiserver-kubelet-client"
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
	kubeletClient                  certFiles // the apiserver's, for logs and exec
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
	// The API server's identity towards kubelets (logs, exec, port
	// forwarding): the real node's kubelet authorizes it by webhook and
	// allows no anonymous request.
	if cc.kubeletClient, err = p.client("apiserver-kubelet-client", kubeletClientUser, mastersGroup); err != nil {
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
