// Package fleet runs the reference runtimes in fleet mode (one goroutine
// per session pod in this test process, each with its own pod-bound
// token, Session watch and reporter) on the full local control plane, as
// `lull bench` does: a rollout audited like the end-to-end scenarios, and
// a benchmark of what a runtime costs in the fleet.
package fleet

import (
	"os"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"lull.dev/lull/internal/dev/localenv"
	"lull.dev/lull/internal/dev/podprocess"
	"lull.dev/lull/internal/dev/suite"
)

var (
	env *localenv.Env
	c   client.Client
)

func TestMain(m *testing.M) {
	// The controller runs as its own process, from the lull binary; the
	// runtimes run in this one.
	os.Exit(suite.Run(m, suite.Options{Name: "fleet",
		Env:     localenv.Options{Runtimes: podprocess.ModeFleet},
		Started: func(p suite.Plane) { env, c = p.Env, p.Client },
	}))
}
