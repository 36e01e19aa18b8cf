// Package suite starts the local control plane for a test suite that runs
// on it (test/e2e, test/fleet, test/realnode) and stops it when the suite
// is done, in one order for all of them: the auditor, then the plane, then
// the check of what the plane left on the machine, and only then the
// state directory, which a failed suite keeps for its logs.
package suite

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

// Options says how a suite's plane differs from the others'.
type Options struct {
	// Name prefixes the state directory's name and every line Run
	// prints ("e2e", "fleet", "realnode").
	Name string
	// Env is the plane's options. Run sets StateDir (a new directory),
	// Progress (standard error) and LullBinary (lull, built afresh from
	// this module, so the controller and runtimes run the code under
	// test).
	Env localenv.Options
	// Audit starts the independent auditor on the plane's etcd before the
	// tests run.
	Audit bool
	// StopMustSucceed fails the suite when the plane does not stop
	// cleanly; otherwise the error is printed only.
	StopMustSucceed bool
	// AfterStop, when set, checks the machine once the plane has stopped;
	// an error fails the suite.
	AfterStop func() error
	// Started is given the plane before the tests run, for the suite's
	// package variables.
	Started func(Plane)
}

// Plane is what a suite's tests use of the plane Run started.
type Plane struct {
	Env    *localenv.Env
	Client client.Client
	// Auditor is nil unless Options.Audit.
	Auditor *audit.Auditor
	// LullBinary is the lull executable the plane runs.
	LullBinary string
}

// Run builds lull, starts the plane, runs the suite's tests and stops the
// plane, and returns the exit code for os.Exit: m.Run's, or 1 when the
// plane could not be started or stopped (see Options) or AfterStop failed.
func Run(m *testing.M, o Options) int {
	ctrllog.SetLogger(logr.Discard())
	say := func(what ...any) { fmt.Fprintln(os.Stderr, append([]any{o.Name + ":"}, what...)...) }
	fail := func(what ...any) int { say(what...); return 1 }
	dir, err := os.MkdirTemp("", "lull-"+o.Name+"-")
	if err != nil {
		return fail(err)
	}
	bin := filepath.Join(dir, "lull")
	build := exec.Command("go", "build", "-o", bin, "lull.dev/lull/cmd/lull")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fail("build lull:", err)
	}
	ctx := context.Background()
	opts := o.Env
	opts.StateDir, opts.Progress, opts.LullBinary = filepath.Join(dir, "state"), os.Stderr, bin
	env, err := localenv.Up(ctx, opts)
	if err != nil {
		return fail(err)
	}
	code := func() int {
		p := Plane{Env: env, LullBinary: bin}
		if p.Client, err = scenario.NewClient(env.Cluster.Config); err != nil {
			return fail(err)
		}
		if o.Audit {
			auditCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			if p.Auditor, err = audit.Start(auditCtx, env.Cluster.EtcdURL); err != nil {
				return fail(err)
			}
		}
		if o.Started != nil {
			o.Started(p)
		}
		return m.Run()
	}()
	if err := env.Down(); err != nil {
		say("stop:", err)
		if o.StopMustSucceed {
			code = 1
		}
	}
	if o.AfterStop != nil {
		if err := o.AfterStop(); err != nil {
			code = fail(err)
		}
	}
	if code != 0 {
		say("state and logs kept in", dir)
		return code
	}
	_ = os.RemoveAll(dir)
	return code
}
