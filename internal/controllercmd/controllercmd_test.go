package controllercmd

import (
	"io"
	"strings"
	"testing"
)

// TestControllerRefusesStrayArguments: the controller takes flags only. A
// bool flag written with a space (`--leader-elect false`) leaves "false"
// as a positional argument; accepted silently, it would run the manager
// with leader election on, the opposite of what was asked. The command
// must refuse the argument before it reads a kubeconfig or starts anything.
func TestControllerRefusesStrayArguments(t *testing.T) {
	for _, use := range []string{"lull-controller", "controller"} {
		cmd := New(use)
		cmd.SetArgs([]string{"--leader-elect", "false", "--kubeconfig", "/nonexistent/kubeconfig"})
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), `"false"`) {
			t.Errorf("%s --leader-elect false: error %v; want the stray argument \"false\" refused", use, err)
		}
	}
}
