package render

import (
	"slices"
	"testing"
)

// Only images of the former default repository get `lull agent` as their
// command; every other image runs its own entrypoint, whatever its tag,
// digest or registry port.
func TestLegacyAgentCommand(t *testing.T) {
	legacy := []string{"lull", "agent"}
	for image, want := range map[string][]string{
		LegacyAgentRepository + ":v0.1.0":                  legacy,
		LegacyAgentRepository + "@sha256:" + hex64:         legacy,
		LegacyAgentRepository + ":v0.1.0@sha256:" + hex64:  legacy,
		LegacyAgentRepository:                              legacy,
		"ghcr.io/lull-dev/lull-agent:v0.1.0":               nil,
		LegacyAgentRepository + "-agent":                   nil,
		"mirror.example.com:5000/lull-dev/lull:v0.1.0":     nil,
		"mirror.example.com:5000/" + LegacyAgentRepository: nil,
		"ghcr.io/lull-dev/lull/agent:v1":                   nil,
	} {
		if got := legacyAgentCommand(image); !slices.Equal(got, want) {
			t.Errorf("legacyAgentCommand(%q) = %q, want %q", image, got, want)
		}
	}
}

const hex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
