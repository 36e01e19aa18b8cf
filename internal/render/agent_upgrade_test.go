package render_test

import (
	"slices"
	"testing"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/render"
	"lull.dev/lull/internal/render/rendertest"
)

// TestSidecarOfTheFormerDefaultImageStillRunsTheAgent: the CRD used to
// default spec.agent.image to ghcr.io/lull-dev/lull:v0.1.0 (the whole
// `lull` binary, run as `lull agent`), and a CRD default is written into
// the stored object, so every template created with `agent: {}` before
// the lull-agent image keeps naming that image after an upgrade. Rendered
// with no command, its sidecar would run that image's entrypoint with the
// agent's flags and never start, and the upgrade would drain every agent
// session into such a pod. It must still run `lull agent`, exactly as
// before (the same pod template, so the upgrade replaces no pod).
func TestSidecarOfTheFormerDefaultImageStillRunsTheAgent(t *testing.T) {
	for _, image := range []string{"ghcr.io/lull-dev/lull:v0.1.0", "ghcr.io/lull-dev/lull:v0.1.1",
		"ghcr.io/lull-dev/lull@sha256:4c1b0d0e3f2a5b6c7d8e9f00112233445566778899aabbccddeeff0011223344"} {
		tmpl := rendertest.AgentTemplate()
		tmpl.Spec.Agent = &lullv1.AgentSpec{Image: image}
		agent := render.Pod(rendertest.Alice(tmpl), tmpl).Spec.InitContainers[0]
		if !slices.Equal(agent.Command, []string{"lull", "agent"}) {
			t.Errorf("image %s: sidecar command %q, want [lull agent] (the image's entrypoint is not the agent)", image, agent.Command)
		}
	}
	// The lull-agent image, and any other, runs its entrypoint.
	for _, image := range []string{lullv1.DefaultAgentImage, "registry.example.com/lull-agent:v0.1.0", "ghcr.io/lull-dev/lull-agent:v0.2.0", "example.com/ghcr.io/lull-dev/lull:v0.1.0"} {
		tmpl := rendertest.AgentTemplate()
		tmpl.Spec.Agent = &lullv1.AgentSpec{Image: image}
		if agent := render.Pod(rendertest.Alice(tmpl), tmpl).Spec.InitContainers[0]; agent.Command != nil {
			t.Errorf("image %s: sidecar command %q, want the image's entrypoint", image, agent.Command)
		}
	}
}
