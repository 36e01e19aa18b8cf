// Package devcmd holds the commands of lull's dev binary, lull: `lull dev`
// (the local control plane and its demo), `lull bench`, the reference
// runtime (`lull example-runtime`), and the agent and the controller
// (`lull agent`, `lull controller`), which the local control plane runs
// from this binary; one file per command. The binary has the operator
// commands too (package cli), so `lull status` works as `kubectl lull
// status` does.
package devcmd

import (
	"github.com/spf13/cobra"

	"lull.dev/lull/internal/cli"
)

// NewRoot returns the lull command: the operator commands and every
// command of this package.
func NewRoot() *cobra.Command {
	root := cli.NewRoot("lull")
	for _, add := range subcommands {
		root.AddCommand(add())
	}
	return root
}

// subcommands is filled by each command's file in its init, so adding a
// command touches one file.
var subcommands []func() *cobra.Command
