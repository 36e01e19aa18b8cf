package render_test

import (
	"testing"

	"lull.dev/lull/internal/render"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/render/rendertest"
)

// sidecarOnly reports how a rendered pod with the agent sidecar lets a
// container other than the sidecar reach what only the sidecar may have:
// the session's ServiceAccount token (the sidecar's token volume, or any
// projected serviceAccountToken volume, which the kubelet fills for the
// pod's ServiceAccount: the session's), the sidecar's turn table, or the
// sidecar's processes (a shared process namespace exposes
// /proc/<agent>/root and /proc/<agent>/environ to a runtime of the same
// user). "" when none.
func sidecarOnly(pod corev1.PodTemplateSpec, claims []corev1.PersistentVolumeClaim) string {
	if ptr.Deref(pod.Spec.ShareProcessNamespace, false) {
		return "shareProcessNamespace lets every container see the sidecar's processes and files"
	}
	tokenVolumes := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, s := range v.Projected.Sources {
			if s.ServiceAccountToken != nil {
				tokenVolumes[v.Name] = true
			}
		}
	}
	for _, c := range claims {
		switch c.Name {
		case lullv1.AgentTokenVolume, lullv1.AgentStateVolume, lullv1.AgentSocketVolume:
			// The StatefulSet controller puts the claim in place of the
			// pod volume of its name.
			return "claim template " + c.Name + " replaces the sidecar's volume of that name"
		}
	}
	all := append(append([]corev1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...)
	for _, c := range all {
		if c.Name == lullv1.AgentContainerName {
			continue
		}
		for _, m := range c.VolumeMounts {
			switch {
			case tokenVolumes[m.Name]:
				return "container " + c.Name + " mounts token volume " + m.Name
			case m.Name == lullv1.AgentStateVolume:
				return "container " + c.Name + " mounts the sidecar's state volume"
			}
		}
	}
	return ""
}

// TestAgentTokenStaysWithTheSidecar: with spec.agent, code in the runtime
// container (or any container of the template) "cannot reach the API
// server as the session at all" (docs/templates.md). A template that would
// break that must be refused at render (RenderFailed), not rendered.
func TestAgentTokenStaysWithTheSidecar(t *testing.T) {
	mount := func(name, at string) func(c *corev1.Container) {
		return func(c *corev1.Container) {
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: at})
		}
	}
	for _, tc := range []struct {
		name string
		edit func(t *lullv1.SessionTemplate)
	}{
		{"runtime mounts the sidecar's token volume by name", func(t *lullv1.SessionTemplate) {
			mount(lullv1.AgentTokenVolume, "/var/run/secrets/kubernetes.io/serviceaccount")(&t.Spec.Template.Spec.Containers[0])
		}},
		{"another container mounts the sidecar's token volume", func(t *lullv1.SessionTemplate) {
			mount(lullv1.AgentTokenVolume, "/token")(&t.Spec.Template.Spec.Containers[1])
		}},
		{"an init container mounts the sidecar's token volume", func(t *lullv1.SessionTemplate) {
			mount(lullv1.AgentTokenVolume, "/token")(&t.Spec.Template.Spec.InitContainers[0])
		}},
		{"runtime mounts the sidecar's state volume", func(t *lullv1.SessionTemplate) {
			mount(lullv1.AgentStateVolume, "/state")(&t.Spec.Template.Spec.Containers[0])
		}},
		{"runtime mounts its own projected serviceAccountToken volume", func(t *lullv1.SessionTemplate) {
			t.Spec.Template.Spec.Volumes = append(t.Spec.Template.Spec.Volumes, corev1.Volume{Name: "kube-token",
				VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}})
			mount("kube-token", "/var/run/secrets/kubernetes.io/serviceaccount")(&t.Spec.Template.Spec.Containers[0])
		}},
		{"shareProcessNamespace exposes the sidecar's /proc/<pid>/root", func(t *lullv1.SessionTemplate) {
			t.Spec.Template.Spec.ShareProcessNamespace = ptr.To(true)
		}},
		{"claim template named like the sidecar's token volume", func(t *lullv1.SessionTemplate) {
			t.Spec.VolumeClaimTemplates[0].Name = lullv1.AgentTokenVolume
		}},
		{"claim template named like the sidecar's state volume", func(t *lullv1.SessionTemplate) {
			t.Spec.VolumeClaimTemplates[0].Name = lullv1.AgentStateVolume
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := rendertest.AgentTemplate()
			tmpl.Spec.Agent = &lullv1.AgentSpec{}
			tc.edit(tmpl)
			sts, err := render.StatefulSet(rendertest.Alice(tmpl), tmpl, 1)
			if err != nil {
				return // refused at render: RenderFailed, nothing running touched
			}
			if leak := sidecarOnly(sts.Spec.Template, sts.Spec.VolumeClaimTemplates); leak != "" {
				t.Errorf("rendered without an error, but %s", leak)
			}
		})
	}
}
