package cli

import (
	"io"
	"slices"
	"strings"
	"testing"
)

func TestExampleRuntimeIgnoresUnknownFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // the error: proves the known flags were parsed
	}{
		{[]string{"--model=large", "--turn-min=5s", "--turn-max=1s"}, "--turn-min (5s) must not be greater than --turn-max (1s)"},
		{[]string{"--model", "large", "--turn-min", "2s", "-v", "--turn-max=1s", "serve"}, "--turn-min (2s) must not be greater than --turn-max (1s)"},
		{[]string{"--turn-min=-1s"}, "--turn-min (-1s) must not be negative"},
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

func TestIgnoredArgs(t *testing.T) {
	fs := newExampleRuntimeCommand().Flags()
	got := ignoredArgs(fs, []string{"--model=large", "--turn-min", "1s", "--gpu", "a100", "--verbose", "--think-max=2s", "-x", "serve", "--", "--turn-max=3s"})
	want := []string{"--model=large", "--gpu a100", "--verbose", "-x serve", "--turn-max=3s"}
	if !slices.Equal(got, want) {
		t.Errorf("ignored %q, want %q", got, want)
	}
	if got := ignoredArgs(fs, []string{"--turn-min=1s", "--turn-max", "2s"}); len(got) != 0 {
		t.Errorf("ignored %q of known flags", got)
	}
}
