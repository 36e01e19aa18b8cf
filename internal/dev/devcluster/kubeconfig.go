package devcluster

import (
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// contextName names the cluster, user and context in written kubeconfigs.
const contextName = "lull-dev"

// writeKubeconfig writes a kubeconfig for server that authenticates with
// the client certificate id, embedding every credential.
func writeKubeconfig(path, server string, caPEM []byte, id certFiles) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[contextName] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[contextName] = &clientcmdapi.AuthInfo{ClientCertificateData: id.CertPEM, ClientKeyData: id.KeyPEM}
	cfg.Contexts[contextName] = &clientcmdapi.Context{Cluster: contextName, AuthInfo: contextName}
	cfg.CurrentContext = contextName
	return clientcmd.WriteToFile(*cfg, path)
}

// restConfig is the client configuration matching writeKubeconfig.
func restConfig(server string, caPEM []byte, id certFiles) *rest.Config {
	return &rest.Config{
		Host: server,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   caPEM,
			CertData: id.CertPEM,
			KeyData:  id.KeyPEM,
		},
	}
}
