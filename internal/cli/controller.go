package cli

import (
	"github.com/spf13/cobra"

	"lull.dev/lull/internal/controllercmd"
)

func init() {
	subcommands = append(subcommands, func() *cobra.Command { return controllercmd.New("controller") })
}
