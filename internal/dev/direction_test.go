package dev

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// harnessUsers may import the harness: the harness itself (with the dev
// binary's commands, internal/dev/devcmd), the dev binary (cmd/lull: `lull
// dev`, `lull bench`), the reference runtime it runs (and its image's
// binary, cmd/example-runtime), the build tools (hack: `make images`), and
// the tests. The operator CLI (internal/cli, cmd/kubectl-lull) is not one.
var harnessUsers = []string{
	"lull.dev/lull/internal/dev",
	"lull.dev/lull/hack",
	"lull.dev/lull/cmd/lull",
	"lull.dev/lull/cmd/example-runtime",
	"lull.dev/lull/examples",
	"lull.dev/lull/test",
}

func under(path, root string) bool { return path == root || strings.HasPrefix(path, root+"/") }

// TestProductionImportsNoHarness lists every package of the module with
// everything it depends on (tests' imports apart) and fails for a package
// outside harnessUsers that depends on a package under internal/dev,
// directly or through another package (one of harnessUsers, say).
func TestProductionImportsNoHarness(t *testing.T) {
	leaks, production := harnessLeaks(t)
	for _, l := range leaks {
		t.Errorf("%s: production code must not depend on the harness", l)
	}
	if production < 10 {
		t.Fatalf("only %d production packages listed: the test proves nothing", production)
	}
}

// harnessLeaks lists every package of the module (go list, with the extra
// arguments given) and returns, for each package outside harnessUsers,
// the packages under internal/dev it depends on, and the number of such
// production packages.
func harnessLeaks(t *testing.T, goList ...string) (leaks []string, production int) {
	t.Helper()
	// .Deps, not .Imports: a harness package reached through another
	// package is linked all the same.
	args := append(append([]string{"list"}, goList...), "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, "lull.dev/lull/...")
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, deps := fields[0], fields[1:]
		user := false
		for _, u := range harnessUsers {
			user = user || under(pkg, u)
		}
		if user {
			continue
		}
		production++
		for _, d := range deps {
			if under(d, "lull.dev/lull/internal/dev") {
				leaks = append(leaks, pkg+" depends on "+d)
			}
		}
	}
	return leaks, production
}

// TestProductionImportsNoHarnessThroughAnotherPackage: a production
// package that imports a package allowed to use the harness (the
// reference runtime's turnrunner, the dev binary's commands) links the
// harness as surely as one that imports it directly. A file planted
// (through an overlay) in a production package that no binary links,
// importing examples/turnrunner, must be found.
func TestProductionImportsNoHarnessThroughAnotherPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", "lull.dev/lull/internal/catalog/catalogtest").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dir, tmp := strings.TrimSpace(string(out)), t.TempDir()
	leak := filepath.Join(tmp, "leak.go")
	if err := os.WriteFile(leak, []byte("package catalogtest\n\nimport _ \"lull.dev/lull/examples/turnrunner\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(dir, "zz_leak.go"): leak}})
	if err != nil {
		t.Fatal(err)
	}
	ov := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	leaks, _ := harnessLeaks(t, "-overlay="+ov)
	found := false
	for _, l := range leaks {
		found = found || strings.HasPrefix(l, "lull.dev/lull/internal/catalog/catalogtest depends on lull.dev/lull/internal/dev/")
	}
	if !found {
		t.Errorf("catalogtest importing examples/turnrunner (which imports internal/dev) not reported; leaks found: %v", leaks)
	}
}

// The production binaries link only their own packages of this module,
// named here, and no module that only the local control plane needs (a
// server-side Kubernetes package in a binary means a harness package
// leaked in). A package lands in a list only if it is that binary's.
var binaries = map[string]map[string]bool{
	"lull.dev/lull/cmd/lull-controller": set(
		"lull.dev/lull/api/v1alpha1", "lull.dev/lull/drain", "lull.dev/lull/internal/mergepatch", "lull.dev/lull/internal/catalog",
		"lull.dev/lull/internal/controller/filesweep", "lull.dev/lull/internal/orphan",
		"lull.dev/lull/internal/controller/session", "lull.dev/lull/internal/controller/template",
		"lull.dev/lull/internal/controllercmd", "lull.dev/lull/internal/files", "lull.dev/lull/internal/index",
		"lull.dev/lull/internal/lifecycle", "lull.dev/lull/internal/manager",
		"lull.dev/lull/internal/render", "lull.dev/lull/internal/requestmetrics", "lull.dev/lull/internal/rollout",
		"lull.dev/lull/internal/version", "lull.dev/lull/cmd/lull-controller"),
	"lull.dev/lull/cmd/lull-agent": set(
		"lull.dev/lull/api/v1alpha1", "lull.dev/lull/drain", "lull.dev/lull/internal/mergepatch", "lull.dev/lull/runtimesdk",
		"lull.dev/lull/internal/agent", "lull.dev/lull/internal/version",
		"lull.dev/lull/cmd/lull-agent"),
	// The operator CLI, `kubectl lull`. It reaches the controller's
	// packages through manager.Scheme.
	"lull.dev/lull/cmd/kubectl-lull": set(
		"lull.dev/lull/api/v1alpha1", "lull.dev/lull/drain", "lull.dev/lull/internal/mergepatch", "lull.dev/lull/internal/catalog",
		"lull.dev/lull/internal/controller/filesweep", "lull.dev/lull/internal/orphan",
		"lull.dev/lull/internal/controller/session", "lull.dev/lull/internal/controller/template",
		"lull.dev/lull/internal/files", "lull.dev/lull/internal/index", "lull.dev/lull/internal/lifecycle", "lull.dev/lull/internal/manager",
		"lull.dev/lull/internal/render", "lull.dev/lull/internal/requestmetrics", "lull.dev/lull/internal/rollout",
		"lull.dev/lull/internal/version", "lull.dev/lull/internal/cli", "lull.dev/lull/cmd/kubectl-lull"),
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
