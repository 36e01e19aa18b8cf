// Command lull-agent is the lull agent, the drain sidecar: the binary of
// the agent image that a SessionTemplate with `agent:` injects into every
// session pod. It speaks the drain protocol for a runtime in any language
// and serves it a local HTTP API (docs/runtime-authors.md). It links only
// the agent and the runtime SDK; `lull-agent --help` lists its flags, the
// same as `lull agent`'s.
package main

import (
	"os"

	"lull.dev/lull/internal/agent"
)

func main() {
	if err := agent.NewCommand("lull-agent").Execute(); err != nil {
		os.Exit(1)
	}
}
