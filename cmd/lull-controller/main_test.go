package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// lullPackages are the only packages of this module the production binary
// may link: the API, the drain protocol and the controller's own. A new
// package lands here only if it is the controller's; the local control
// plane, the bench, the demo, the auditor, the pod runner and the CLI must
// never be linked into lull-controller.
var lullPackages = map[string]bool{
	"lull.dev/lull/api/v1alpha1":                  true,
	"lull.dev/lull/drain":                         true,
	"lull.dev/lull/internal/catalog":              true,
	"lull.dev/lull/internal/controller/filesweep": true,
	"lull.dev/lull/internal/controller/orphan":    true,
	"lull.dev/lull/internal/controller/session":   true,
	"lull.dev/lull/internal/controller/template":  true,
	"lull.dev/lull/internal/controllercmd":        true,
	"lull.dev/lull/internal/lifecycle":            true,
	"lull.dev/lull/internal/manager":              true,
	"lull.dev/lull/internal/render":               true,
	"lull.dev/lull/internal/requestmetrics":       true,
	"lull.dev/lull/internal/rollout":              true,
	"lull.dev/lull/internal/version":              true,
	"lull.dev/lull/cmd/lull-controller":           true,
}

// foreignModules are modules that only the local control plane needs: a
// server-side Kubernetes package in the controller means a harness package
// leaked in.
var foreignModules = []string{
	"go.etcd.io/etcd/server", "go.etcd.io/etcd/client", "sigs.k8s.io/kwok", "k8s.io/apiserver", "k8s.io/kubernetes",
	"k8s.io/kube-aggregator", "k8s.io/controller-manager",
}

// TestProductionBinaryLinksOnlyTheController holds the direction of
// imports: production packages never import the harness.
func TestProductionBinaryLinksOnlyTheController(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 100 {
		t.Fatalf("go list -deps named %d packages: the test proves nothing", len(deps))
	}
	for _, p := range deps {
		if strings.HasPrefix(p, "lull.dev/") && !lullPackages[p] {
			t.Errorf("lull-controller links %s, which is not the controller's (see lullPackages)", p)
		}
		for _, m := range foreignModules {
			if p == m || strings.HasPrefix(p, m+"/") {
				t.Errorf("lull-controller links %s (module %s): only the local control plane needs it", p, m)
			}
		}
	}
}

// TestProductionBinaryRuns builds lull-controller and runs --version and
// --help: the binary starts without a cluster and names its flags.
func TestProductionBinaryRuns(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "lull-controller")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "lull-controller version ") || !strings.Contains(string(out), "go1.") {
		t.Errorf("lull-controller --version: %v, %q; want its version and Go version", err, out)
	}
	out, err = exec.Command(bin, "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--leader-elect") || !strings.Contains(string(out), "--max-concurrent-reconciles") {
		t.Errorf("lull-controller --help: %v, %q; want the controller's flags", err, out)
	}
	if fi, err := os.Stat(bin); err == nil {
		t.Logf("lull-controller: %.1f MiB", float64(fi.Size())/(1<<20))
	}
}
