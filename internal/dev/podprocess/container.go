package podprocess

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// container is one container of a pod as the runner runs it: a host
// command, worked out once per pod, whose processes come and go.
type container struct {
	name      string
	path      string   // the executable
	program   Program  // in ModeFleet, runs the runtime in place of path
	args, env []string // mount paths rewritten
	log       string   // the file its processes' output is appended to
	// reportsStatus: its crashes and restarts are written to the pod's
	// status (the runtime container only).
	reportsStatus bool
	cur           *run // guarded by Runner.mu
}

// prepare works out how pod's containers run on the host: the host
// directories of its volumes, a kubeconfig if a container would see a
// token, and each container's command, args and environment. It starts
// nothing; an error (a claim not bound yet, a refused token request) is
// worth retrying.
func (r *Runner) prepare(ctx context.Context, pod *corev1.Pod) (*proc, error) {
	pod = pod.DeepCopy()
	rc := runtimeContainer(pod)
	if rc == nil {
		return nil, errors.New("no containers")
	}
	ac := agentSidecar(pod)
	dirs, err := r.podVolumes(ctx, pod)
	if err != nil {
		return nil, err
	}
	var kubeconfig string
	if seesToken(pod, rc) || ac != nil && seesToken(pod, ac) {
		if kubeconfig, err = r.writeKubeconfig(ctx, pod); err != nil {
			return nil, err
		}
	}
	p := &proc{pod: pod, quit: make(chan struct{})}
	if p.runtime, err = r.container(pod, rc, dirs, kubeconfig, r.logPath(pod), r.opts.Mode == ModeFleet); err != nil {
		return nil, err
	}
	p.runtime.reportsStatus = true
	p.runtime.env = append(p.runtime.env, EnvJournal+"="+filepath.Join(r.JournalDir(), podBase(pod)+".jsonl"))
	if ac != nil {
		if p.agent, err = r.container(pod, ac, dirs, kubeconfig, r.sidecarLogPath(pod), false); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// container works out how c runs: Options.Command's command (or, when
// inProcess, Options.Program's program and arguments), c's resolved
// environment, both with c's mount paths rewritten to their host
// directories (subPath directories created, as the kubelet creates them),
// EnvDevMounts, and KUBECONFIG if c would see a token.
func (r *Runner) container(pod *corev1.Pod, c *corev1.Container, dirs map[string]string, kubeconfig, log string, inProcess bool) (*container, error) {
	env := containerEnv(pod, c)
	vars := make(map[string]string, len(env))
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		vars[k] = v
	}
	mounts, err := mountsOf(c, dirs, vars)
	if err != nil {
		return nil, err
	}
	for _, m := range mounts {
		if err := os.MkdirAll(m.host, 0o755); err != nil {
			return nil, fmt.Errorf("container %s: %w", c.Name, err)
		}
	}
	var (
		name string
		prog Program
		args []string
	)
	if inProcess {
		prog, args = r.opts.Program(pod, c)
	} else {
		name, args = r.opts.Command(pod, c)
	}
	args = append([]string(nil), args...)
	for i := range args {
		args[i] = rewritePaths(expandVars(args[i], vars), mounts)
	}
	for i, e := range env {
		k, v, _ := strings.Cut(e, "=")
		env[i] = k + "=" + rewritePaths(v, mounts)
	}
	env = append(env, EnvDevMounts+"="+devMounts(mounts), "HOME="+os.Getenv("HOME"), "PATH="+os.Getenv("PATH"))
	if seesToken(pod, c) {
		env = append(env, "KUBECONFIG="+kubeconfig)
	}
	return &container{name: c.Name, path: name, program: prog, args: args, env: env, log: log}, nil
}

// seesToken reports whether c would see a ServiceAccount token on a real
// kubelet: the pod leaves automountServiceAccountToken unset or true, or c
// mounts a projected volume with a serviceAccountToken source. (The
// ServiceAccount's own automountServiceAccountToken is not consulted.)
func seesToken(pod *corev1.Pod, c *corev1.Container) bool {
	if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
		return true
	}
	for _, vm := range c.VolumeMounts {
		for _, v := range pod.Spec.Volumes {
			if v.Name != vm.Name || v.Projected == nil {
				continue
			}
			for _, s := range v.Projected.Sources {
				if s.ServiceAccountToken != nil {
					return true
				}
			}
		}
	}
	return false
}

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
	path := filepath.Join(r.opts.Dir, "kubeconfig", podBase(pod))
	return path, clientcmd.WriteToFile(*cfg, path)
}

func runtimeContainer(pod *corev1.Pod) *corev1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == lullv1.RuntimeContainerName {
			return &pod.Spec.Containers[i]
		}
	}
	if len(pod.Spec.Containers) > 0 {
		return &pod.Spec.Containers[0]
	}
	return nil
}

// containerEnv resolves a container's environment as the kubelet would for
// literal values (with $(NAME) references to the variables before them
// expanded) and the downward API's pod fields.
func containerEnv(pod *corev1.Pod, c *corev1.Container) []string {
	var env []string
	defined := map[string]string{}
	for _, e := range c.Env {
		v := expandVars(e.Value, defined)
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
		defined[e.Name] = v
	}
	return env
}
