// Command lull-controller is lull's controller manager, the binary of the
// controller's image: the Session and SessionTemplate controllers, the
// files sweeper and the orphan reaper, with leader election, health probes
// and Prometheus metrics. It links only the controller (the operator CLI
// is kubectl-lull; the local control plane and the bench are in `lull`);
// `lull-controller --help` lists its flags, the same as `lull
// controller`'s.
package main

import (
	"os"

	"lull.dev/lull/internal/controllercmd"
)

func main() {
	if err := controllercmd.New("lull-controller").Execute(); err != nil {
		os.Exit(1)
	}
}
