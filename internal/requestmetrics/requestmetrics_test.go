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
		"/api/v1/namespaces/ns/finalize":                          "namespaces/finalize",
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

// TestVerbAsTheAPIServerCountsIt: a GET that opens a watch is WATCH, a GET
// of a collection LIST, a GET of one object GET.
func TestVerbAsTheAPIServerCountsIt(t *testing.T) {
	for url, want := range map[string]string{
		"https://h/api/v1/pods?watch=true&resourceVersion=1":               "WATCH",
		"https://h/api/v1/namespaces/ns/pods?watch=1":                      "WATCH",
		"https://h/api/v1/pods?watch=false":                                "LIST",
		"https://h/api/v1/pods":                                            "LIST",
		"https://h/api/v1/namespaces/ns/pods?labelSelector=a":              "LIST",
		"https://h/api/v1/namespaces":                                      "LIST",
		"https://h/api/v1/namespaces/ns/status":                            "GET",
		"https://h/api/v1/namespaces/ns":                                   "GET",
		"https://h/api/v1/namespaces/ns/pods/p":                            "GET",
		"https://h/apis/lull.dev/v1alpha1/namespaces/ns/sessions/s":        "GET",
		"https://h/apis/lull.dev/v1alpha1/namespaces/ns/sessions/s/status": "GET",
		"https://h/apis/rbac.authorization.k8s.io/v1/clusterroles/r":       "GET",
		"https://h/healthz":                                                "GET",
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
