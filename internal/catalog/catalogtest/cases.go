// Package catalogtest holds the one table of catalog cases that both the
// Go matcher (package catalog) and the API server's admission policy
// (test/integration) are run against: the two must agree on every row.
package catalogtest

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// The two namespaces the cases use; NamespaceA alone is in the scoped
// entry.
const (
	NamespaceA = "lull-catalog-a"
	NamespaceB = "lull-catalog-b"
)

// Digests the catalog lists (ListedDigest, OtherListedDigest) and one it
// does not.
const (
	ListedDigest      = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	OtherListedDigest = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	UnlistedDigest    = "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
)

// Catalog returns the catalog every case is judged against.
func Catalog() *lullv1.RuntimeCatalog {
	return &lullv1.RuntimeCatalog{
		ObjectMeta: metav1.ObjectMeta{Name: lullv1.RuntimeCatalogName},
		Spec: lullv1.RuntimeCatalogSpec{Images: []lullv1.CatalogImage{
			{Repository: "registry.example.com/agent-runtime", Tags: []string{"v1", "v2"}, Digests: []string{ListedDigest}},
			{Repository: "registry.example.com:5000/team/rt", Tags: []string{"stable"}},
			{Repository: "registry.example.com/scoped", Tags: []string{"v1"}, Namespaces: []string{NamespaceA}},
			{Repository: "nginx", Digests: []string{OtherListedDigest}},
			// An IPv6 registry host: its brackets hold colons before the
			// port's.
			{Repository: "[fd00::1]:5000/team/rt", Tags: []string{"stable"}},
			// Non-ASCII before the tag's colon: Go splits by bytes, CEL by
			// code points; both must cut at the same colon.
			{Repository: "registry.example.com/ünïcødé", Tags: []string{"v1"}},
		}},
	}
}

// Case is one image in one namespace, and whether Catalog allows it.
type Case struct {
	Name      string
	Image     string
	Namespace string
	Allowed   bool
}

// Cases are the rows both the matcher and admission must agree on.
var Cases = []Case{
	{"listed tag", "registry.example.com/agent-runtime:v1", NamespaceA, true},
	{"listed tag, another namespace", "registry.example.com/agent-runtime:v2", NamespaceB, true},
	{"unlisted tag", "registry.example.com/agent-runtime:v3", NamespaceA, false},
	{"tags are exact: case", "registry.example.com/agent-runtime:V1", NamespaceA, false},
	{"listed digest", "registry.example.com/agent-runtime@" + ListedDigest, NamespaceA, true},
	{"digest wins: listed tag, unlisted digest", "registry.example.com/agent-runtime:v1@" + UnlistedDigest, NamespaceA, false},
	{"digest wins: unlisted tag, listed digest", "registry.example.com/agent-runtime:v9@" + ListedDigest, NamespaceA, true},
	{"no tag and no digest", "registry.example.com/agent-runtime", NamespaceA, false},
	{"registry port is not a tag", "registry.example.com:5000/team/rt:stable", NamespaceA, true},
	{"registry port alone", "registry.example.com:5000/team/rt", NamespaceA, false},
	{"unlisted repository", "registry.example.com/other:v1", NamespaceA, false},
	{"repository prefix is not the repository", "registry.example.com/agent-runtime-debug:v1", NamespaceA, false},
	{"scoped entry, its namespace", "registry.example.com/scoped:v1", NamespaceA, true},
	{"scoped entry, another namespace", "registry.example.com/scoped:v1", NamespaceB, false},
	{"digest-only entry", "nginx@" + OtherListedDigest, NamespaceB, true},
	{"digest-only entry, tag", "nginx:1.27", NamespaceB, false},
	{"no normalization", "docker.io/library/nginx@" + OtherListedDigest, NamespaceB, false},
	{"repositories are exact: case", "Registry.example.com/agent-runtime:v1", NamespaceA, false},
	{"empty tag", "registry.example.com/agent-runtime:", NamespaceA, false},
	{"trailing slash after the tag", "registry.example.com/agent-runtime:v1/", NamespaceA, false},
	{"two digests", "registry.example.com/agent-runtime@" + ListedDigest + "@" + ListedDigest, NamespaceA, false},
	{"digest of another algorithm", "registry.example.com/agent-runtime@sha512:" + strings.Repeat("a", 128), NamespaceA, false},
	{"digest in uppercase", "registry.example.com/agent-runtime@" + strings.ToUpper(ListedDigest), NamespaceA, false},
	{"registry port, listed tag, unlisted digest", "registry.example.com:5000/team/rt:stable@" + UnlistedDigest, NamespaceA, false},
	{"IPv6 registry host, listed tag", "[fd00::1]:5000/team/rt:stable", NamespaceB, true},
	{"IPv6 registry host, no tag", "[fd00::1]:5000/team/rt", NamespaceB, false},
	{"non-ASCII repository, listed tag", "registry.example.com/ünïcødé:v1", NamespaceA, true},
	{"non-ASCII repository, unlisted tag", "registry.example.com/ünïcødé:v2", NamespaceA, false},
	{"very long tag", "registry.example.com/agent-runtime:" + strings.Repeat("v", 4096), NamespaceA, false},
}
