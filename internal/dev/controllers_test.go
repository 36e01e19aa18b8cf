package dev

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// controllersRoot holds one package per controller (session, template,
// filesweep): each stands on its own, on the API package and the pure
// packages beside it (rollout, render, catalog, orphan, files, index), and none
// depends on another. What two controllers share lives in one of those.
const controllersRoot = "lull.dev/lull/internal/controller"

// controllerOf returns the controller a package of the module belongs to
// ("session" for internal/controller/session and anything under it), or ""
// for a package outside internal/controller.
func controllerOf(pkg string) string {
	rest, ok := strings.CutPrefix(pkg, controllersRoot+"/")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, "/")
	return name
}

// TestControllersImportNoOtherController lists every package under
// internal/controller with everything it depends on (tests' imports
// apart) and fails for one that depends on another controller's package,
// directly or through a package outside internal/controller.
func TestControllersImportNoOtherController(t *testing.T) {
	crossings, controllers := controllerCrossings(t)
	for _, c := range crossings {
		t.Errorf("%s: a controller must not depend on another; move what they share beside them (rollout, render, catalog, files, index, the API package)", c)
	}
	if len(controllers) < 3 {
		t.Fatalf("only %d controllers listed (%v): the test proves nothing", len(controllers), controllers)
	}
}

// controllerCrossings lists every package of the module (go list, with
// the extra arguments given) and returns, for each package under
// internal/controller, the packages of another controller it depends on,
// and the controllers found.
func controllerCrossings(t *testing.T, goList ...string) (crossings []string, controllers map[string]bool) {
	t.Helper()
	// .Deps, not .Imports: a controller reached through another package
	// is linked all the same.
	args := append(append([]string{"list"}, goList...), "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, "lull.dev/lull/...")
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	controllers = map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, deps := fields[0], fields[1:]
		own := controllerOf(pkg)
		if own == "" {
			continue
		}
		controllers[own] = true
		for _, d := range deps {
			if other := controllerOf(d); other != "" && other != own {
				crossings = append(crossings, pkg+" depends on "+d)
			}
		}
	}
	return crossings, controllers
}

// TestControllerDependingOnAnotherThroughAPackageIsFound: files planted
// (through an overlay) so that the files sweeper imports catalogtest and
// catalogtest imports the template controller must be reported as the
// sweeper depending on the template controller.
func TestControllerDependingOnAnotherThroughAPackageIsFound(t *testing.T) {
	tmp := t.TempDir()
	replace := map[string]string{}
	for pkg, src := range map[string]string{
		"lull.dev/lull/internal/controller/filesweep": "package filesweep\n\nimport _ \"lull.dev/lull/internal/catalog/catalogtest\"\n",
		"lull.dev/lull/internal/catalog/catalogtest":  "package catalogtest\n\nimport _ \"lull.dev/lull/internal/controller/template\"\n",
	} {
		out, err := exec.Command("go", "list", "-f", "{{.Dir}}", pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		planted := filepath.Join(tmp, filepath.Base(pkg)+".go")
		if err := os.WriteFile(planted, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		replace[filepath.Join(strings.TrimSpace(string(out)), "zz_crossing.go")] = planted
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": replace})
	if err != nil {
		t.Fatal(err)
	}
	ov := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	crossings, _ := controllerCrossings(t, "-overlay="+ov)
	found := false
	for _, c := range crossings {
		found = found || c == "lull.dev/lull/internal/controller/filesweep depends on lull.dev/lull/internal/controller/template"
	}
	if !found {
		t.Errorf("the sweeper depending on the template controller through catalogtest not reported; crossings found: %v", crossings)
	}
}
