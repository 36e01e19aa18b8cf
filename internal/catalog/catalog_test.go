package catalog

import (
	"strings"
	"testing"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/catalog/catalogtest"
)

// The shared table: test/integration runs the same rows through the API
// server's admission policy.
func TestAllowedSharedTable(t *testing.T) {
	c := catalogtest.Catalog()
	for _, tc := range catalogtest.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			ok, why := Allowed(c, tc.Namespace, tc.Image)
			if ok != tc.Allowed {
				t.Errorf("Allowed(%s in %s) = %v (%s), want %v", tc.Image, tc.Namespace, ok, why, tc.Allowed)
			}
			if !strings.Contains(why, `RuntimeCatalog "default"`) {
				t.Errorf("why %q does not name the catalog", why)
			}
		})
	}
}

func TestParse(t *testing.T) {
	for image, want := range map[string]Image{
		"rt":                             {Repository: "rt"},
		"rt:v1":                          {Repository: "rt", Tag: "v1"},
		"reg:5000/rt":                    {Repository: "reg:5000/rt"},
		"reg:5000/rt:v1":                 {Repository: "reg:5000/rt", Tag: "v1"},
		"reg:5000/rt@sha256:ab":          {Repository: "reg:5000/rt", Digest: "sha256:ab"},
		"reg:5000/team/rt:v1@sha256:ab":  {Repository: "reg:5000/team/rt", Tag: "v1", Digest: "sha256:ab"},
		"reg.example.com/a/b/c:1.2.3-rc": {Repository: "reg.example.com/a/b/c", Tag: "1.2.3-rc"},
	} {
		if got := Parse(image); got != want {
			t.Errorf("Parse(%q) = %+v, want %+v", image, got, want)
		}
	}
}

func TestNoCatalogAllowsEverything(t *testing.T) {
	ok, why := Allowed(nil, "any", "anything:at-all")
	if !ok || !strings.Contains(why, "every image is allowed") {
		t.Errorf("Allowed(nil) = %v, %q", ok, why)
	}
}

func TestEmptyCatalogAllowsNothing(t *testing.T) {
	c := &lullv1.RuntimeCatalog{}
	c.Name = lullv1.RuntimeCatalogName
	if ok, why := Allowed(c, "ns", "rt:v1"); ok || !strings.Contains(why, "repository rt is not in") {
		t.Errorf("Allowed(empty catalog) = %v, %q", ok, why)
	}
}

// The reason says what to change: the repository, the namespace, the tag
// or the digest.
func TestWhyNamesWhatIsMissing(t *testing.T) {
	c := catalogtest.Catalog()
	for _, tc := range []struct{ image, ns, want string }{
		{"registry.example.com/other:v1", catalogtest.NamespaceA, "repository registry.example.com/other is not in"},
		{"registry.example.com/scoped:v1", catalogtest.NamespaceB, "but not for namespace " + catalogtest.NamespaceB},
		{"registry.example.com/agent-runtime:v3", catalogtest.NamespaceA, "tag v3 of registry.example.com/agent-runtime is not in"},
		{"registry.example.com/agent-runtime:v1@" + catalogtest.UnlistedDigest, catalogtest.NamespaceA, "judged by its digest"},
		{"registry.example.com/agent-runtime", catalogtest.NamespaceA, "names no tag or digest"},
	} {
		if _, why := Allowed(c, tc.ns, tc.image); !strings.Contains(why, tc.want) {
			t.Errorf("Allowed(%s in %s): why %q, want it to contain %q", tc.image, tc.ns, why, tc.want)
		}
	}
}
