package devcmd

import (
	"io"
	"strings"
	"testing"
)

// The command hands its arguments to the runtime, which parses them: known
// flags are checked before anything starts, unknown ones are ignored.
func TestExampleRuntimeIgnoresUnknownFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // the error: proves the known flags were parsed
	}{
		{[]string{"--model=large", "--turn-min=5s", "--turn-max=1s"}, "--turn-min (5s) must not be greater than --turn-max (1s)"},
		{[]string{"--model", "large", "--turn-min", "2s", "-v", "--turn-max=1s", "serve"}, "--turn-min (2s) must not be greater than --turn-max (1s)"},
		{[]string{"--turn-min=-1s"}, "--turn-min (-1s) must not be negative"},
		{[]string{"--report-refresh=2h"}, "--report-refresh: 2h0m0s is not between 1s and 1h0m0s"},
	} {
		cmd := newExampleRuntimeCommand()
		cmd.SetArgs(tc.args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestExampleRuntimeHelpListsFlags(t *testing.T) {
	cmd := newExampleRuntimeCommand()
	var out strings.Builder
	cmd.SetArgs([]string{"--help"})
	cmd.SetOut(&out)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"--turn-min", "--turns", "--report-refresh"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("--help lacks %s:\n%s", f, out.String())
		}
	}
}
