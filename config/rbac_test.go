package config

import (
	"io/fs"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// A SessionTemplate may reference Secrets (env.valueFrom.secretKeyRef,
// volumes); the kubelet resolves them under the pod's identity. The
// controller needs no access to Secrets to run such a template, and must
// have none, so a template author cannot use it to read a Secret they could
// not reference in a pod of their own.
func TestControllerRoleCannotReadSecrets(t *testing.T) {
	b, err := fs.ReadFile(RBAC, "rbac/role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(b, &role); err != nil {
		t.Fatal(err)
	}
	if len(role.Rules) == 0 {
		t.Fatal("rbac/role.yaml has no rules: not the controller's ClusterRole")
	}
	for _, r := range role.Rules {
		for _, res := range []string{"secrets", "*"} {
			if slices.Contains(r.Resources, res) && (slices.Contains(r.APIGroups, "") || slices.Contains(r.APIGroups, "*")) {
				t.Errorf("the controller's ClusterRole grants %v on %s: it must not read what a template only references", r.Verbs, res)
			}
		}
	}
}
