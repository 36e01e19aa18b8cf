package cli

import (
	"github.com/spf13/cobra"

	"lull.dev/lull/internal/agentcmd"
)

func init() {
	subcommands = append(subcommands, func() *cobra.Command { return agentcmd.New("agent") })
}
