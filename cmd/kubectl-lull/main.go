// Command kubectl-lull is lull's operator CLI, `kubectl lull` once it is
// on PATH: status, rollout, force, suspend, resume and catalog. It links
// no harness package: no local control plane, bench, auditor or etcd
// client (TestProductionBinariesLinkOnlyTheirOwn in internal/dev). Run
// `kubectl lull --help` for its commands.
package main

import (
	"os"

	"github.com/spf13/cobra"

	"lull.dev/lull/internal/cli"
)

func main() {
	root := cli.NewRoot("kubectl-lull")
	// kubectl runs it as `kubectl lull`: its help says so.
	root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl lull"}
	os.Exit(cli.ExitCode(root.Execute()))
}
