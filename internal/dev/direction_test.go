package dev

import (
	"os/exec"
	"strings"
	"testing"
)

// harnessUsers may import the harness: the harness itself, the CLI that
// runs it (`lull dev`, `lull bench`), the reference runtime it runs, the
// build tools (hack: `make images`), and the tests.
var harnessUsers = []string{
	"lull.dev/lull/internal/dev",
	"lull.dev/lull/hack",
	"lull.dev/lull/internal/cli",
	"lull.dev/lull/cmd/lull",
	"lull.dev/lull/examples",
	"lull.dev/lull/test",
}

func under(path, root string) bool { return path == root || strings.HasPrefix(path, root+"/") }

// TestProductionImportsNoHarness lists every package of the module with its
// imports (tests' imports apart) and fails for a package outside
// harnessUsers that imports a package under internal/dev.
func TestProductionImportsNoHarness(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "lull.dev/lull/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	production := 0
	for _, line := range lines {
		fields := strings.Fields(line)
		pkg, imports := fields[0], fields[1:]
		user := false
		for _, u := range harnessUsers {
			user = user || under(pkg, u)
		}
		if user {
			continue
		}
		production++
		for _, imp := range imports {
			if under(imp, "lull.dev/lull/internal/dev") {
				t.Errorf("%s imports %s: production code must not depend on the harness", pkg, imp)
			}
		}
	}
	if production < 10 {
		t.Fatalf("only %d production packages listed: the test proves nothing", production)
	}
}

// The production binaries link only their own packages of this module,
// named here, and no module that only the local control plane needs (a
// server-side Kubernetes package in a binary means a harness package
// leaked in). A package lands in a list only if it is that binary's.
var binaries = map[string]map[string]bool{
	"lull.dev/lull/cmd/lull-controller": set(
		"lull.dev/lull/api/v1alpha1", "lull.dev/lull/drain", "lull.dev/lull/internal/catalog",
		"lull.dev/lull/internal/controller/filesweep", "lull.dev/lull/internal/controller/orphan",
		"lull.dev/lull/internal/controller/session", "lull.dev/lull/internal/controller/template",
		"lull.dev/lull/internal/controllercmd", "lull.dev/lull/internal/lifecycle", "lull.dev/lull/internal/manager",
		"lull.dev/lull/internal/render", "lull.dev/lull/internal/requestmetrics", "lull.dev/lull/internal/rollout",
		"lull.dev/lull/internal/version", "lull.dev/lull/cmd/lull-controller"),
	"lull.dev/lull/cmd/lull-agent": set(
		"lull.dev/lull/api/v1alpha1", "lull.dev/lull/drain", "lull.dev/lull/runtimesdk",
		"lull.dev/lull/internal/drainsidecar", "lull.dev/lull/internal/agentcmd", "lull.dev/lull/internal/version",
		"lull.dev/lull/cmd/lull-agent"),
}

var foreignModules = []string{
	"go.etcd.io/etcd/server", "go.etcd.io/etcd/client", "sigs.k8s.io/kwok", "k8s.io/apiserver", "k8s.io/kubernetes",
	"k8s.io/kube-aggregator", "k8s.io/controller-manager", "github.com/google/go-containerregistry",
}

func set(items ...string) map[string]bool {
	m := map[string]bool{}
	for _, i := range items {
		m[i] = true
	}
	return m
}

func TestProductionBinariesLinkOnlyTheirOwn(t *testing.T) {
	for bin, allowed := range binaries {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", bin).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", bin, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 50 {
			t.Fatalf("go list -deps %s named %d packages: the test proves nothing", bin, len(deps))
		}
		for _, p := range deps {
			if under(p, "lull.dev/lull") && !allowed[p] {
				t.Errorf("%s links %s, which is not its own (see binaries)", bin, p)
			}
			for _, m := range foreignModules {
				if under(p, m) {
					t.Errorf("%s links %s (module %s): only the local control plane needs it", bin, p, m)
				}
			}
		}
	}
}
