// Package fleet runs the reference runtimes in fleet mode (one goroutine
// per session pod in this test process, each with its own pod-bound
// token, Session watch and reporter) on the full local control plane, as
// `lull bench` does: a rollout audited like the end-to-end scenarios, and
// a benchmark of what a runtime costs in the fleet.
package fleet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"lull.dev/lull/internal/dev/localenv"
	"lull.dev/lull/internal/dev/podprocess"
	"lull.dev/lull/internal/dev/scenario"
)

var (
	env *localenv.Env
	c   client.Client
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrllog.SetLogger(logr.Discard())
	dir, err := os.MkdirTemp("", "lull-fleet-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The controller runs as its own process, from the lull binary; the
	// runtimes run in this one.
	bin := filepath.Join(dir, "lull")
	build := exec.Command("go", "build", "-o", bin, "lull.dev/lull/cmd/lull")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "fleet: build lull:", err)
		return 1
	}
	env, err = localenv.Up(context.Background(), localenv.Options{StateDir: filepath.Join(dir, "state"), Progress: os.Stderr,
		LullBinary: bin, Runtimes: podprocess.ModeFleet})
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		return 1
	}
	defer env.Down()
	if c, err = scenario.NewClient(env.Cluster.Config); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		return 1
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "fleet: state and logs kept in %s\n", dir)
		return code
	}
	_ = os.RemoveAll(dir)
	return code
}
