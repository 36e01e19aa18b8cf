// Package cli holds lull's command line: one file per subcommand, each a
// thin layer over the package that does the work.
package cli

import (
	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"lull.dev/lull/internal/version"
)

// NewRoot returns the lull command with every subcommand attached.
func NewRoot() *cobra.Command {
	root := &cobra.Command{
		Use:              "lull",
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

// quietLibraryLog silences controller-runtime's log for commands that use
// it only as a client library (it would warn that no logger was set).
// controller-runtime takes the first logger it is given, so `lull
// controller` must not call this: it sets its own.
func quietLibraryLog(cmd *cobra.Command, _ []string) {
	if cmd.Name() != "controller" {
		ctrllog.SetLogger(logr.Discard())
	}
}
