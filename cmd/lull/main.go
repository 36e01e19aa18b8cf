// Command lull is lull's dev binary: the local control plane and its demo
// (`lull dev`), the benchmark (`lull bench`), the reference runtime, the
// agent and the controller as the local control plane runs them, and the
// operator commands of kubectl-lull. Run `lull --help` for its commands.
package main

import (
	"os"

	"lull.dev/lull/internal/cli"
	"lull.dev/lull/internal/dev/devcmd"
)

func main() {
	os.Exit(cli.ExitCode(devcmd.NewRoot().Execute()))
}
