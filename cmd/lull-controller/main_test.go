package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

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
