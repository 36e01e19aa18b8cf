// Command example-runtime is lull's reference runtime, `lull example-runtime`,
// as the binary of an image: the runtime container of the sessions on the
// local environment's real node. It takes the same flags and environment
// (see examples/turnrunner) and stops on SIGTERM once its accepted turns
// are done. $TURN_JOURNAL, when set, is the file its turn journal is
// appended to: $LULL_JOURNAL under another name, since a template may not
// set a LULL_ variable. $IGNORE_SIGTERM=true makes it ignore SIGTERM, as
// a runtime that does not handle it would: the kubelet kills it at the end
// of its pod's grace period.
//
// `example-runtime selfcheck` takes no turn: it prints what the runtime
// container can reach (no ServiceAccount token at the standard paths, the
// API server refusing a request without one) and exits 0 only if all
// holds. A user runs it by hand in a session with the agent sidecar:
// `kubectl exec <pod> -c runtime -- example-runtime selfcheck`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"lull.dev/lull/examples/turnrunner"
	"lull.dev/lull/internal/dev/podprocess"
)

// EnvTurnJournal names the journal file in the image (localenv.OnRealNode
// sets it).
const EnvTurnJournal = "TURN_JOURNAL"

// EnvIgnoreSIGTERM, "true", makes the runtime ignore SIGTERM.
const EnvIgnoreSIGTERM = "IGNORE_SIGTERM"

func main() {
	stopOn := []os.Signal{syscall.SIGTERM, os.Interrupt}
	if os.Getenv(EnvIgnoreSIGTERM) == "true" {
		signal.Ignore(syscall.SIGTERM)
		stopOn = stopOn[1:]
	}
	ctx, stop := signal.NotifyContext(context.Background(), stopOn...)
	defer stop()
	env := os.Environ()
	if j := os.Getenv(EnvTurnJournal); j != "" {
		env = append(env, podprocess.EnvJournal+"="+j)
	}
	err := turnrunner.Main(ctx, turnrunner.Process{Args: os.Args[1:], Env: env, Stdout: os.Stdout, Stderr: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, "example-runtime:", err)
		os.Exit(1)
	}
}
