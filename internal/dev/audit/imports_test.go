package audit

import (
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The auditor shares no decision code with the controller: of this module
// it may import only the API types and the turn journal, directly or
// through anything it imports. A bug in the controller's rules must not
// excuse the same deletion in the auditor.
var allowedLull = map[string]bool{
	"lull.dev/lull/api/v1alpha1":         true,
	"lull.dev/lull/internal/dev/journal": true,
	"lull.dev/lull/internal/dev/audit":   true,
}

func lullPackage(path string) bool {
	return path == "lull.dev/lull" || strings.HasPrefix(path, "lull.dev/lull/")
}

// Direct imports of every file of the package, tests included, read with
// go/parser.
func TestImportsOnlyAPIAndJournal(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files: %v", err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if lullPackage(path) && !allowedLull[path] {
				t.Errorf("%s imports %s: the auditor may import only %v of this module", f, path, keys(allowedLull))
			}
		}
	}
}

// Everything the package depends on, transitively, as the go command sees
// it: an allowed package must not pull in the controller's code either.
func TestDependsOnlyOnAPIAndJournal(t *testing.T) {
	// The go command that runs this test; tests always run under one.
	gobin := filepath.Join(goruntime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		t.Fatalf("the go command is not at %s: %v", gobin, err)
	}
	out, err := exec.Command(gobin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list -deps listed nothing")
	}
	for _, p := range deps {
		if lullPackage(p) && !allowedLull[p] {
			t.Errorf("the auditor depends on %s: it may depend only on %v of this module", p, keys(allowedLull))
		}
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		if k != "lull.dev/lull/internal/dev/audit" {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}
