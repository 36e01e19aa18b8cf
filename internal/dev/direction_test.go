package dev

import (
	"os/exec"
	"strings"
	"testing"
)

// harnessUsers may import the harness: the harness itself, the CLI that
// runs it (`lull dev`, `lull bench`), the reference runtime it runs, and
// the tests.
var harnessUsers = []string{
	"lull.dev/lull/internal/dev",
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
