// Command lull rolls out new runtimes to live interactive session pods
// without destroying the work in them. Run `lull --help` for its commands;
// installed as kubectl-lull it also works as `kubectl lull`.
package main

import (
	"os"

	"lull.dev/lull/internal/cli"
)

func main() {
	os.Exit(cli.ExitCode(cli.NewRoot().Execute()))
}
