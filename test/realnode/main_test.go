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
	"fmt"
	"os"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"lull.dev/lull/internal/dev/audit"
	"lull.dev/lull/internal/dev/devcluster"
	"lull.dev/lull/internal/dev/localenv"
	"lull.dev/lull/internal/dev/suite"
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
	if unavailable = devcluster.CheckRealNodeHost(); unavailable != nil {
		os.Exit(m.Run()) // every test skips or fails with the reason
	}
	os.Exit(suite.Run(m, suite.Options{Name: "realnode", Audit: true,
		Env: localenv.Options{RealNode: true},
		// A plane that does not stop cleanly may leave the real node's
		// processes, mounts or cgroups behind.
		StopMustSucceed: true,
		AfterStop:       realNodeLeftNothing,
		Started:         func(p suite.Plane) { env, c, auditor = p.Env, p.Client, p.Auditor },
	}))
}

// realNodeLeftNothing fails when, the plane stopped, anything the real
// node wrote outside the state directory is left on the machine.
func realNodeLeftNothing() error {
	if left, err := devcluster.RealNodeLeftovers(); left != "" || err != nil {
		return fmt.Errorf("after the plane stopped, the real node left %s (%v)", left, err)
	}
	return nil
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
