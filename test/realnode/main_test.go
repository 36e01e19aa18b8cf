// Package realnode is the real-node tier: lull's images running as real
// containers on the local environment's real node (containerd, runc and a
// kubelet on this machine, docs/real-node.md), where KWOK's simulation
// cannot hide what a kubelet does: the injected sidecar, its socket, the
// projected token, logs and termination.
//
// It needs Linux, root and the packages hack/real-node-deps.sh installs
// (`make test` runs it). Without them every test is skipped with the
// reason, or fails when LULL_REQUIRE_REAL_NODE=1 (as .ci/run sets): in CI
// the tier is never skipped in silence.
package realnode

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
	"lull.dev/lull/internal/dev/devcluster"
	"lull.dev/lull/internal/dev/localenv"
	"lull.dev/lull/internal/dev/scenario"
)

var (
	env     *localenv.Env
	c       client.Client
	auditor *audit.Auditor
	// unavailable is why the machine cannot run the real node; the tests
	// skip (or fail, see requireNode) with it.
	unavailable error
)

// requireEnv is LULL_REQUIRE_REAL_NODE: set, a machine that cannot run the
// real node fails the tier instead of skipping it.
const requireEnv = "LULL_REQUIRE_REAL_NODE"

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrllog.SetLogger(logr.Discard())
	if unavailable = devcluster.CheckRealNodeHost(); unavailable != nil {
		return m.Run() // every test skips or fails with the reason
	}
	dir, err := os.MkdirTemp("", "lull-realnode-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	bin := filepath.Join(dir, "lull")
	build := exec.Command("go", "build", "-o", bin, "lull.dev/lull/cmd/lull")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "realnode: build lull:", err)
		return 1
	}
	ctx := context.Background()
	env, err = localenv.Up(ctx, localenv.Options{StateDir: filepath.Join(dir, "state"), Progress: os.Stderr, LullBinary: bin, RealNode: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "realnode:", err)
		return 1
	}
	code := func() int {
		if c, err = scenario.NewClient(env.Cluster.Config); err != nil {
			fmt.Fprintln(os.Stderr, "realnode:", err)
			return 1
		}
		auditCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		if auditor, err = audit.Start(auditCtx, env.Cluster.EtcdURL); err != nil {
			fmt.Fprintln(os.Stderr, "realnode:", err)
			return 1
		}
		return m.Run()
	}()
	if err := env.Down(); err != nil {
		fmt.Fprintln(os.Stderr, "realnode: stop:", err)
		code = 1
	}
	// The plane is stopped: nothing the real node wrote outside the state
	// directory may be left on the machine.
	if left, err := devcluster.RealNodeLeftovers(); left != "" || err != nil {
		fmt.Fprintf(os.Stderr, "realnode: after the plane stopped, the real node left %s (%v)\n", left, err)
		code = 1
	}
	if code == 0 {
		os.RemoveAll(dir)
	} else {
		fmt.Fprintln(os.Stderr, "realnode: state and logs kept in", dir)
	}
	return code
}

// requireNode skips the test (fails it under LULL_REQUIRE_REAL_NODE=1)
// when this machine cannot run the real node, naming why and the fix.
func requireNode(t *testing.T) {
	t.Helper()
	if unavailable == nil {
		return
	}
	if os.Getenv(requireEnv) == "1" {
		t.Fatalf("the real-node tier cannot run here, and %s=1 requires it: %v", requireEnv, unavailable)
	}
	t.Skipf("the real-node tier cannot run here: %v (%s=1 makes this a failure, as in CI)", unavailable, requireEnv)
}
