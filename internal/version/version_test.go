package version

import (
	"runtime/debug"
	"testing"
)

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		name string
		info debug.BuildInfo
		want string
	}{
		{"go build in a clean tree", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abc"}, {Key: "vcs.modified", Value: "false"}}},
			"(devel) revision 0123abc, go1.26.8"},
		{"modified tree", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abc"}, {Key: "vcs.modified", Value: "true"}}},
			"(devel) revision 0123abc (modified), go1.26.8"},
		{"go install of a tag, no VCS", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.3.0"}},
			"v0.3.0, go1.26.8"},
		{"no main version", debug.BuildInfo{GoVersion: "go1.26.8"}, "(devel), go1.26.8"},
	} {
		if got := format(&tc.info); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
