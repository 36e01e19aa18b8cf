// Package cli is lull's operator command line: status, rollout, force,
// suspend, resume and catalog, one file per command, each a thin layer over
// the API and the packages that decide. kubectl-lull (`kubectl lull`) is
// these commands alone; the dev binary, lull, adds the harness's commands
// to them (internal/dev/devcmd). It links no harness package
// (TestProductionBinariesLinkOnlyTheirOwn in internal/dev).
package cli

import (
	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"lull.dev/lull/internal/version"
)

// NewRoot returns the root command named use ("kubectl-lull", or "lull"
// in the dev binary) with every operator command attached.
func NewRoot(use string) *cobra.Command {
	root := &cobra.Command{
		Use:              use,
		Version:          version.String(),
		Short:            "Roll out new runtimes to live session pods between their turns",
		SilenceUsage:     true,
		SilenceErrors:    false,
		PersistentPreRun: quietLibraryLog,
	}
	for _, add := range subcommands {
		root.AddCommand(add())
	}
	return root
}

// subcommands is filled by each command's file in its init, so adding a
// command touches one file.
var subcommands []func() *cobra.Command

// quietLibraryLog silences controller-runtime's log: the commands use it
// only as a client library, and it would warn that no logger was set. A
// command that sets a logger of its own sets its own PersistentPreRun too
// (controller-runtime takes the first logger it is given).
func quietLibraryLog(*cobra.Command, []string) {
	ctrllog.SetLogger(logr.Discard())
}
