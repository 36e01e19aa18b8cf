// Package e2e runs rollout scenarios on the full local control plane (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, KWOK), with the
// lull controller as its own process and one reference runtime process per
// running session pod. Every scenario ends with an independent audit: no pod
// holding an active turn was deleted, and no healthy pod was deleted without
// a matching Drained report.
package e2e

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

	"lull.dev/lull/internal/dev/audit"
	"lull.dev/lull/internal/dev/localenv"
	"lull.dev/lull/internal/dev/scenario"
)

var (
	env     *localenv.Env
	lullBin string
	c       client.Client
	auditor *audit.Auditor
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrllog.SetLogger(logr.Discard())
	dir, err := os.MkdirTemp("", "lull-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	bin := filepath.Join(dir, "lull")
	lullBin = bin
	build := exec.Command("go", "build", "-o", bin, "lull.dev/lull/cmd/lull")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: build lull:", err)
		return 1
	}
	ctx := context.Background()
	// The files sweeper passes every second and waits 2 s after a change, so
	// TestFilesSweptOnlyWhenUnneeded sees many sweeps in little time.
	env, err = localenv.Up(ctx, localenv.Options{StateDir: filepath.Join(dir, "state"), Progress: os.Stderr, LullBinary: bin,
		ControllerArgs: []string{"--files-sweep-interval=1s", "--files-sweep-grace=2s"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer env.Down()
	if c, err = scenario.NewClient(env.Cluster.Config); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	auditCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if auditor, err = audit.Start(auditCtx, env.Cluster.EtcdURL); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "e2e: state and logs kept in %s\n", dir)
		return code
	}
	_ = os.RemoveAll(dir)
	return code
}
