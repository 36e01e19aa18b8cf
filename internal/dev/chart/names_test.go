package chart

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// TestNamesTheAPIServerAccepts: with the longest release name Helm allows
// (53 characters), every rendered object's name passes the API server's
// rule for its kind: a Service's is a DNS-1035 label (at most 63
// characters), the others' DNS-1123 subdomains.
func TestNamesTheAPIServerAccepts(t *testing.T) {
	for _, release := range []string{"lull", strings.Repeat("a", 53), "lull-" + strings.Repeat("b", 48)} {
		objs := render(t, Options{Release: release, Values: map[string]any{"serviceMonitor": map[string]any{"enabled": true}}})
		for _, o := range objs {
			check := validation.IsDNS1123Subdomain
			if o.GetKind() == "Service" {
				check = validation.IsDNS1035Label
			}
			if errs := check(o.GetName()); len(errs) > 0 {
				t.Errorf("release %s: %s %q: %s", release, o.GetKind(), o.GetName(), strings.Join(errs, "; "))
			}
		}
	}
}
