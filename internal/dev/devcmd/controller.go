package devcmd

import (
	"github.com/spf13/cobra"

	"lull.dev/lull/internal/controllercmd"
)

func init() { subcommands = append(subcommands, newControllerCommand) }

// newControllerCommand is `lull controller`, the controller manager the
// local control plane runs. It sets its own logger, and controller-runtime
// takes the first it is given: its own PersistentPreRun keeps the root's,
// which silences controller-runtime's log, from running first.
func newControllerCommand() *cobra.Command {
	cmd := controllercmd.New("controller")
	cmd.PersistentPreRun = func(*cobra.Command, []string) {}
	return cmd
}
