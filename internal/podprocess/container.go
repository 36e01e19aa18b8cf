package podprocess

import (
	"context"
	"fmt"
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
)

// writeKubeconfig requests a token for the pod's ServiceAccount, bound to
// the pod, and writes a kubeconfig that authenticates with it.
func (r *Runner) writeKubeconfig(ctx context.Context, pod *corev1.Pod) (string, error) {
	tr, err := r.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To[int64](24 * 3600),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("request token for serviceaccount %s: %w", pod.Spec.ServiceAccountName, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["dev"] = &clientcmdapi.Cluster{Server: r.opts.Server, CertificateAuthority: r.opts.CAFile}
	cfg.AuthInfos["runtime"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["dev"] = &clientcmdapi.Context{Cluster: "dev", AuthInfo: "runtime", Namespace: pod.Namespace}
	cfg.CurrentContext = "dev"
	path := filepath.Join(r.opts.Dir, "kubeconfig", fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID))
	return path, clientcmd.WriteToFile(*cfg, path)
}

func runtimeContainer(pod *corev1.Pod) *corev1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == "runtime" {
			return &pod.Spec.Containers[i]
		}
	}
	if len(pod.Spec.Containers) > 0 {
		return &pod.Spec.Containers[0]
	}
	return nil
}

// containerEnv resolves a container's environment as the kubelet would for
// literal values and the downward API's pod fields.
func containerEnv(pod *corev1.Pod, c *corev1.Container) []string {
	var env []string
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				v = pod.Name
			case "metadata.namespace":
				v = pod.Namespace
			case "metadata.uid":
				v = string(pod.UID)
			case "spec.nodeName":
				v = pod.Spec.NodeName
			case "spec.serviceAccountName":
				v = pod.Spec.ServiceAccountName
			}
		}
		env = append(env, e.Name+"="+v)
	}
	return env
}
