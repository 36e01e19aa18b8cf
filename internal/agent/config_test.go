package agent

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// The agent's reports carry no startedAt: it speaks for a runtime in
// another container, whose start it does not know. The options' refresh
// replaces the environment's.
func TestAgentReportsWithoutAStart(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		lullv1.EnvSessionName: "s1", lullv1.EnvSessionNamespace: "ns", lullv1.EnvPodName: "s1-0", lullv1.EnvPodUID: "pod-1",
		"KUBECONFIG": kubeconfig, "LULL_REPORT_REFRESH": "30s",
	}
	cfg, err := runtimeConfig(func(k string) string { return env[k] }, Options{ReportRefresh: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.OmitStart {
		t.Error("OmitStart = false: the agent's reports would say when the agent started, as if it were the runtime's start")
	}
	if cfg.ReportRefresh != 2*time.Minute || cfg.PodUID != "pod-1" {
		t.Errorf("config = refresh %s pod %s, want the options' 2m0s and the environment's pod-1", cfg.ReportRefresh, cfg.PodUID)
	}
}
