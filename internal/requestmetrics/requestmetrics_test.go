package requestmetrics

import (
	"net/http"
	"testing"
)

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

func TestVerbCountsAWatchAsWATCH(t *testing.T) {
	for url, want := range map[string]string{
		"https://h/api/v1/pods?watch=true&resourceVersion=1": "WATCH",
		"https://h/api/v1/pods?watch=1":                      "WATCH",
		"https://h/api/v1/pods?watch=false":                  "GET",
		"https://h/api/v1/pods":                              "GET",
	} {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := Verb(req); got != want {
			t.Errorf("Verb(GET %s) = %s, want %s", url, got, want)
		}
	}
	req, _ := http.NewRequest(http.MethodPatch, "https://h/api/v1/pods/p?watch=true", nil)
	if got := Verb(req); got != "PATCH" {
		t.Errorf("Verb(PATCH) = %s, want PATCH", got)
	}
}
