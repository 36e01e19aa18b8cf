package chart

import (
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// kustomize renders config/default as `kubectl apply -k config/default`
// would (kustomize's own Go API, krusty).
func kustomize(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	dir := filepath.Join(Dir(), "..", "..", "config", "default")
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	b, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// blankLine is a line break followed by a line of white space only.
var blankLine = regexp.MustCompile(`\n[ \t]*\n`)

// dropBlankLines returns v with every blank line removed from its strings.
// kustomize's YAML parser (kyaml, on go-yaml v3) reads a folded scalar
// (>-) whose continuation lines are indented further, as the admission
// policies' CEL expressions are written, with an empty line before each
// such line; Helm's (sigs.k8s.io/yaml, as kubectl apply -f and the API
// server's clients) reads the single line break the YAML spec gives
// (1.2.2, example 8.10). CEL ignores the difference; no other is hidden.
func dropBlankLines(v any) any {
	switch v := v.(type) {
	case string:
		for blankLine.MatchString(v) {
			v = blankLine.ReplaceAllString(v, "\n")
		}
		return v
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = dropBlankLines(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = dropBlankLines(e)
		}
		return out
	default:
		return v
	}
}

func byKind(objs []*unstructured.Unstructured) map[string][]*unstructured.Unstructured {
	m := map[string][]*unstructured.Unstructured{}
	for _, o := range objs {
		m[o.GetKind()] = append(m[o.GetKind()], o)
	}
	return m
}

func byName(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	m := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		m[o.GetName()] = o
	}
	return m
}

// TestChartMatchesKustomize: the chart and config/default (kustomize)
// install the same lull. Every kind kustomize renders the chart renders as
// often (the Namespace apart: Helm's --create-namespace makes it), and
// the parts that decide what lull may do are equal, names, namespaces and
// labels apart: the CRDs, the controller's ClusterRole rules, the
// leader-election Role rules, the ValidatingAdmissionPolicies and their
// bindings; the bindings grant those roles to the controller's
// ServiceAccount.
func TestChartMatchesKustomize(t *testing.T) {
	const ns = "elsewhere" // not kustomize's lull-system: namespaces must not matter
	k, h := byKind(kustomize(t)), byKind(render(t, Options{Release: "lull", Namespace: ns}))

	for kind, objs := range k {
		if kind == "Namespace" {
			continue
		}
		if len(h[kind]) != len(objs) {
			t.Errorf("kustomize renders %d %s, the chart %d", len(objs), kind, len(h[kind]))
		}
	}

	compareSpecs := func(kind string, path ...string) {
		t.Helper()
		hn := byName(h[kind])
		for _, ko := range k[kind] {
			ho, ok := hn[ko.GetName()]
			if !ok {
				t.Errorf("the chart renders no %s %s", kind, ko.GetName())
				continue
			}
			kv, _, _ := unstructured.NestedFieldNoCopy(ko.Object, path...)
			hv, _, _ := unstructured.NestedFieldNoCopy(ho.Object, path...)
			kv, hv = dropBlankLines(kv), dropBlankLines(hv)
			if kv == nil || !equality.Semantic.DeepEqual(kv, hv) {
				t.Errorf("%s %s: the chart's %v differs from kustomize's:\nchart:     %v\nkustomize: %v", kind, ko.GetName(), path, hv, kv)
			}
		}
	}
	compareSpecs("CustomResourceDefinition", "spec")
	compareSpecs("ValidatingAdmissionPolicy", "spec")
	compareSpecs("ValidatingAdmissionPolicyBinding", "spec")

	kcr, hcr := only[rbacv1.ClusterRole](t, k["ClusterRole"], "ClusterRole"), only[rbacv1.ClusterRole](t, h["ClusterRole"], "ClusterRole")
	if len(kcr.Rules) == 0 || !equality.Semantic.DeepEqual(kcr.Rules, hcr.Rules) {
		t.Errorf("ClusterRole rules differ:\nchart:     %+v\nkustomize: %+v", hcr.Rules, kcr.Rules)
	}
	kr, hr := only[rbacv1.Role](t, k["Role"], "Role"), only[rbacv1.Role](t, h["Role"], "Role")
	if len(kr.Rules) == 0 || !equality.Semantic.DeepEqual(kr.Rules, hr.Rules) {
		t.Errorf("leader-election Role rules differ:\nchart:     %+v\nkustomize: %+v", hr.Rules, kr.Rules)
	}
	if hr.Namespace != ns {
		t.Errorf("leader-election Role in namespace %q, want the release's %q (the controller's Lease is there)", hr.Namespace, ns)
	}

	sa := h["ServiceAccount"][0]
	wantSubject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.GetName(), Namespace: ns}}
	crb := only[rbacv1.ClusterRoleBinding](t, h["ClusterRoleBinding"], "ClusterRoleBinding")
	if crb.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: hcr.Name}) || !slices.Equal(crb.Subjects, wantSubject) {
		t.Errorf("ClusterRoleBinding grants %+v to %+v, want ClusterRole %s to %+v", crb.RoleRef, crb.Subjects, hcr.Name, wantSubject)
	}
	rb := only[rbacv1.RoleBinding](t, h["RoleBinding"], "RoleBinding")
	if rb.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: hr.Name}) || !slices.Equal(rb.Subjects, wantSubject) || rb.Namespace != ns {
		t.Errorf("RoleBinding %s/%s grants %+v to %+v, want Role %s to %+v in %s", rb.Namespace, rb.Name, rb.RoleRef, rb.Subjects, hr.Name, wantSubject, ns)
	}
}
