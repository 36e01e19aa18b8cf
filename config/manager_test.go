package config

import (
	"bytes"
	"os"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestControllerDeploymentMeetsRestrictedPodSecurity: the controller's
// image runs as a numeric non-root user with nothing to write, so its
// Deployment must pass the `restricted` Pod Security Standard and run in a
// namespace that enforces it: runAsNonRoot, no privilege escalation, every
// capability dropped, a RuntimeDefault (or Localhost) seccomp profile
// (pod or container level), and the read-only root filesystem it claims.
func TestControllerDeploymentMeetsRestrictedPodSecurity(t *testing.T) {
	b, err := os.ReadFile("manager/manager.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var dep *appsv1.Deployment
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		var d appsv1.Deployment
		if err := yaml.Unmarshal(doc, &d); err != nil {
			t.Fatal(err)
		}
		if d.Kind == "Deployment" {
			dep = &d
		}
	}
	if dep == nil {
		t.Fatal("manager/manager.yaml holds no Deployment")
	}
	pod := dep.Spec.Template.Spec
	psc := pod.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if len(pod.Containers) == 0 {
		t.Fatal("the controller's Deployment has no container")
	}
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		sc := c.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		if !deref(sc.RunAsNonRoot, deref(psc.RunAsNonRoot, false)) {
			t.Errorf("container %s: runAsNonRoot is not true", c.Name)
		}
		if deref(sc.AllowPrivilegeEscalation, true) {
			t.Errorf("container %s: allowPrivilegeEscalation is not false", c.Name)
		}
		if sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) > 0 {
			t.Errorf("container %s: capabilities %+v, want drop [ALL] and nothing added", c.Name, sc.Capabilities)
		}
		sp := sc.SeccompProfile
		if sp == nil {
			sp = psc.SeccompProfile
		}
		if sp == nil || (sp.Type != corev1.SeccompProfileTypeRuntimeDefault && sp.Type != corev1.SeccompProfileTypeLocalhost) {
			t.Errorf("container %s: seccompProfile %+v, want RuntimeDefault (restricted refuses the pod without it)", c.Name, sp)
		}
		if !deref(sc.ReadOnlyRootFilesystem, false) {
			t.Errorf("container %s: readOnlyRootFilesystem is not true", c.Name)
		}
	}
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
