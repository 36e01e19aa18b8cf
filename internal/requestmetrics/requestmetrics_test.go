package requestmetrics

import "testing"

func TestResource(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/namespaces/ns/pods/p":                            "pods",
		"/api/v1/namespaces/ns/pods":                              "pods",
		"/api/v1/pods":                                            "pods",
		"/api/v1/namespaces/ns":                                   "namespaces",
		"/apis/lull.dev/v1alpha1/namespaces/ns/sessions/s/status": "sessions/status",
		"/apis/events.k8s.io/v1/namespaces/ns/events":             "events",
		"/apis/apps/v1/namespaces/ns/statefulsets/s":              "statefulsets",
		"/healthz": "other",
		"/apis":    "other",
	} {
		if got := Resource(path); got != want {
			t.Errorf("Resource(%q) = %q, want %q", path, got, want)
		}
	}
}
