package devcmd

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/demo"
	"lull.dev/lull/internal/dev/devcluster"
)

func TestValidateDemo(t *testing.T) {
	none := func(string) bool { return false }
	set := func(flags ...string) func(string) bool {
		return func(f string) bool {
			for _, g := range flags {
				if f == g {
					return true
				}
			}
			return false
		}
	}
	passive := func(edit func(*demo.Options)) demo.Options {
		d := demo.Defaults()
		d.Strategy = lullv1.UpdateStrategyPassive
		edit(&d)
		return d
	}
	for _, tt := range []struct {
		name    string
		d       demo.Options
		changed func(string) bool
		want    string // substring of the error; "" for none
	}{
		{"defaults", demo.Defaults(), none, ""},
		{"passive defaults", passive(func(*demo.Options) {}), none, ""},
		{"unknown strategy", func() demo.Options { d := demo.Defaults(); d.Strategy = "Replace"; return d }(), none, `--strategy must be Drain or Passive, got "Replace"`},
		{"lower case", func() demo.Options { d := demo.Defaults(); d.Strategy = "passive"; return d }(), none, "--strategy must be Drain or Passive"},
		{"passive flag under Drain", demo.Defaults(), set("max-lifetime"), "--max-lifetime applies to --strategy Passive only"},
		{"lifetime under a minute", passive(func(d *demo.Options) { d.MaxLifetime = 30 * time.Second }), set("max-lifetime"), "--max-lifetime (30s) must be at least 1m"},
		{"no idle limit", passive(func(d *demo.Options) { d.IdleSuspendAfter = 0 }), set("idle-suspend-after"), "--idle-suspend-after (0s) must be positive"},
		{"no sessions", passive(func(d *demo.Options) { d.Sessions = 0 }), none, "--sessions must be at least 1"},
	} {
		err := validateDemo(tt.d, tt.changed)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: error %v, want it to say %q", tt.name, err, tt.want)
		}
	}
}

// A run refused because the machine's real node is in use, or because
// the machine cannot run one (not root, packages missing, ...), leaves no
// temporary state directory behind, and says nothing of logs kept; a
// --state-dir the user gave is never removed.
func TestRealNodeRefusalLeavesNoTemporaryStateDir(t *testing.T) {
	for _, refused := range []error{
		fmt.Errorf("start: %w", devcluster.ErrRealNodeInUse),
		fmt.Errorf("devcluster: the real node needs root: %w", devcluster.ErrRealNodeRefused),
	} {
		tmp, err := newStateDir("", "lull-dev-test-*")
		if err != nil {
			t.Fatal(err)
		}
		if got := tmp.finish(refused); strings.Contains(got.Error(), "logs kept") {
			t.Errorf("refusal says %q", got)
		}
		if _, err := os.Stat(tmp.path); !os.IsNotExist(err) {
			t.Errorf("temporary state dir %s left after the refusal %q: %v", tmp.path, refused, err)
			os.RemoveAll(tmp.path)
		}
		given := t.TempDir()
		_ = stateDir{path: given}.finish(refused)
		if _, err := os.Stat(given); err != nil {
			t.Errorf("the user's --state-dir was removed after %q: %v", refused, err)
		}
	}
}
