package devcmd

import (
	"github.com/spf13/cobra"

	"lull.dev/lull/internal/agent"
)

func init() {
	subcommands = append(subcommands, func() *cobra.Command { return agent.NewCommand("agent") })
}
