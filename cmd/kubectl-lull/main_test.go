package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestOperatorBinaryRuns builds kubectl-lull and runs --version and
// --help: the binary starts without a cluster, calls itself `kubectl
// lull`, and has the operator's commands and none of the harness's.
func TestOperatorBinaryRuns(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "kubectl-lull")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "kubectl lull version ") || !strings.Contains(string(out), "go1.") {
		t.Errorf("kubectl-lull --version: %v, %q; want its version and Go version", err, out)
	}
	out, err = exec.Command(bin, "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "kubectl lull [command]") {
		t.Fatalf("kubectl-lull --help: %v, %q; want the usage of `kubectl lull`", err, out)
	}
	commands := map[string]bool{}
	section := false
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case line == "Available Commands:":
			section = true
		case section && line == "":
			section = false
		case section:
			commands[strings.Fields(line)[0]] = true
		}
	}
	for _, c := range []string{"status", "rollout", "force", "suspend", "resume", "catalog"} {
		if !commands[c] {
			t.Errorf("kubectl-lull --help does not list %s; commands %v", c, commands)
		}
	}
	for _, c := range []string{"dev", "bench", "agent", "controller", "example-runtime"} {
		if commands[c] {
			t.Errorf("kubectl-lull has %s, a command of the dev binary lull", c)
		}
	}
	if fi, err := os.Stat(bin); err == nil {
		t.Logf("kubectl-lull: %.1f MiB", float64(fi.Size())/(1<<20))
	}
}
