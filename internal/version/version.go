// Package version says which build of lull a binary is, from what the Go
// toolchain records in it (runtime/debug.ReadBuildInfo): the module
// version, the VCS revision and whether the tree was modified, and the Go
// version. Nothing is stamped with -ldflags, so `go build` and `go
// install` give the same answer.
package version

import (
	"fmt"
	"runtime/debug"
)

// String returns the build's version, e.g. "(devel) revision 0123abcd4567
// (modified), go1.26.8"; parts the build did not record are left out.
func String() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (built without module information)"
	}
	return format(info)
}

func format(info *debug.BuildInfo) string {
	var revision, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	out := info.Main.Version
	if out == "" {
		out = "(devel)"
	}
	if revision != "" {
		out += " revision " + revision
		if modified == "true" {
			out += " (modified)"
		}
	}
	return fmt.Sprintf("%s, %s", out, info.GoVersion)
}
