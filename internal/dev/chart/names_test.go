package chart

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// TestNamesTheAPIServerAccepts: with the longest release name Helm allows
// (53 characters), and with release names Helm allows that a Service's
// name may not hold (dots, a leading digit), every rendered object's name
// passes the API server's rule for its kind: a Service's is a DNS-1035
// label (at most 63 characters, a letter first, no dots), the others'
// DNS-1123 subdomains.
func TestNamesTheAPIServerAccepts(t *testing.T) {
	for _, release := range []string{"lull", strings.Repeat("a", 53), "lull-" + strings.Repeat("b", 48),
		"lull.prod", "1st", "9" + strings.Repeat(".c", 26)} {
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

// TestPodLabelsCannotTakeTheSelectorsLabels: a podLabels key that is one of
// the Deployment's selector labels would make the pod template's labels
// miss the selector, which the API server refuses. The chart refuses it
// first, naming the value and the key.
func TestPodLabelsCannotTakeTheSelectorsLabels(t *testing.T) {
	for _, key := range []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component"} {
		_, err := Render(Options{Values: map[string]any{"podLabels": map[string]any{key: "other"}}})
		if err == nil || !strings.Contains(err.Error(), "podLabels") || !strings.Contains(err.Error(), key) {
			t.Errorf("podLabels {%s: other}: err %v, want one naming podLabels and %s", key, err, key)
		}
	}
	if _, err := Render(Options{Values: map[string]any{"podLabels": map[string]any{"team": "platform"}}}); err != nil {
		t.Errorf("podLabels {team: platform}: %v", err)
	}
}

// TestMetricsAndHealthOnDifferentPorts: the controller listens for metrics
// and for probes on two ports; one number for both would leave it unable to
// bind the second and restarting forever. The chart refuses it, naming
// both values.
func TestMetricsAndHealthOnDifferentPorts(t *testing.T) {
	_, err := Render(Options{Values: map[string]any{"healthPort": 8080}})
	if err == nil || !strings.Contains(err.Error(), "metrics.port") || !strings.Contains(err.Error(), "healthPort") {
		t.Errorf("healthPort 8080 with metrics.port 8080: err %v, want one naming metrics.port and healthPort", err)
	}
}
