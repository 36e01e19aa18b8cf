package realnode

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"
)

// execIn runs command in a container of a pod by the path `kubectl exec`
// takes: the API server's pods/exec, which the API server carries to the
// kubelet's streaming server with its kubelet client certificate, and the
// kubelet to containerd. As kubectl does, it speaks WebSocket and falls
// back to SPDY. It returns the command's output and exit status; a
// failure to run it at all fails the test.
func execIn(t *testing.T, ns, pod, container string, command ...string) (stdout, stderr string, code int) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	u := cs.CoreV1().RESTClient().Post().Namespace(ns).Resource("pods").Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: command, Stdout: true, Stderr: true}, scheme.ParameterCodec).URL()
	spdy, err := remotecommand.NewSPDYExecutor(env.Cluster.Config, "POST", u)
	if err != nil {
		t.Fatal(err)
	}
	// WebSocket needs GET (RFC 6455 4.1).
	ws, err := remotecommand.NewWebSocketExecutor(env.Cluster.Config, "GET", u.String())
	if err != nil {
		t.Fatal(err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut})
	var exit utilexec.ExitError
	switch {
	case errors.As(err, &exit):
		return out.String(), errOut.String(), exit.ExitStatus()
	case err != nil:
		t.Fatalf("exec %q in %s/%s -c %s: %v (stderr: %s)", command, ns, pod, container, err, errOut.String())
	}
	return out.String(), errOut.String(), 0
}
