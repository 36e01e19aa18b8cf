// Package e2e runs rollout scenarios on the full local control plane (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, KWOK), with the
// lull controller as its own process and one reference runtime process per
// running session pod. Every scenario ends with an independent audit: no pod
// holding an active turn was deleted, and no healthy pod was deleted without
// a matching Drained report.
package e2e

import (
	"os"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"lull.dev/lull/internal/dev/audit"
	"lull.dev/lull/internal/dev/localenv"
	"lull.dev/lull/internal/dev/suite"
)

var (
	env     *localenv.Env
	lullBin string
	c       client.Client
	auditor *audit.Auditor
)

func TestMain(m *testing.M) {
	// The files sweeper passes every second and waits 2 s after a change, so
	// TestFilesSweptOnlyWhenUnneeded sees many sweeps in little time.
	os.Exit(suite.Run(m, suite.Options{Name: "e2e", Audit: true,
		Env:     localenv.Options{ControllerArgs: []string{"--files-sweep-interval=1s", "--files-sweep-grace=2s"}},
		Started: func(p suite.Plane) { env, c, auditor, lullBin = p.Env, p.Client, p.Auditor, p.LullBinary },
	}))
}
