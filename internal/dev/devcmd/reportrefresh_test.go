package devcmd

import (
	"io"
	"strings"
	"testing"

	"lull.dev/lull/internal/agent"

	"github.com/spf13/cobra"

	"lull.dev/lull/runtimesdk"
)

func TestReportRefreshFlag(t *testing.T) {
	for name, newCmd := range map[string]func() *cobra.Command{
		"agent":           func() *cobra.Command { return agent.NewCommand("agent") },
		"example-runtime": newExampleRuntimeCommand,
	} {
		// The default follows LULL_REPORT_REFRESH, when it is usable.
		for env, want := range map[string]string{"": "1m0s", "30s": "30s", "2h": "1m0s", "soon": "1m0s"} {
			t.Setenv(runtimesdk.EnvReportRefresh, env)
			f := newCmd().Flags().Lookup("report-refresh")
			if f == nil {
				t.Fatalf("%s has no --report-refresh", name)
			}
			if f.DefValue != want {
				t.Errorf("%s with %s=%q: --report-refresh defaults to %s, want %s", name, runtimesdk.EnvReportRefresh, env, f.DefValue, want)
			}
		}
		t.Setenv(runtimesdk.EnvReportRefresh, "")

		// Out of bounds: refused before anything starts, naming the flag.
		for _, v := range []string{"500ms", "2h", "0s"} {
			cmd := newCmd()
			cmd.SetArgs([]string{"--report-refresh=" + v})
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			err := cmd.Execute()
			if err == nil || !strings.Contains(err.Error(), "--report-refresh") || !strings.Contains(err.Error(), "between 1s and 1h0m0s") {
				t.Errorf("%s --report-refresh=%s: error %v, want one naming the flag and its bounds", name, v, err)
			}
		}
	}
}
