// Package requestmetrics counts the controller's requests to the API server
// by verb, resource and status code, so the cost of a rollout (writes per
// replaced session) can be read off /metrics. client-go's own
// rest_client_requests_total has no resource label, so it cannot tell an
// Event from a pod delete.
package requestmetrics

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
)

// Requests is lull_controller_api_requests_total{verb, resource, code}:
// verb is as Verb returns it, resource the API resource with its subresource
// ("pods", "sessions/status", "events"), code the HTTP status or "error".
var Requests = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "lull_controller_api_requests_total",
	Help: "Requests the lull controller sent to the API server, by verb (the HTTP method; WATCH for a GET that opens a watch, LIST for a GET of a collection), resource and status code.",
}, []string{"verb", "resource", "code"})

// Instrument wraps cfg's transport so every request is counted in Requests.
func Instrument(cfg *rest.Config) {
	prev := cfg.WrapTransport
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		if prev != nil {
			rt = prev(rt)
		}
		return roundTripper{next: rt}
	}
}

type roundTripper struct{ next http.RoundTripper }

func (t roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	code := "error"
	if err == nil {
		code = strconv.Itoa(resp.StatusCode)
	}
	Requests.WithLabelValues(Verb(req), Resource(req.URL.Path), code).Inc()
	return resp, err
}

// Verb returns req's verb as the API server's apiserver_request_total
// counts it: WATCH for a GET that opens a watch (watch=true or 1), LIST for
// a GET of a collection ("/api/v1/namespaces/ns/pods"), else the HTTP
// method. A watch is one request however long it stays open.
func Verb(req *http.Request) string {
	if req.Method == http.MethodGet {
		if w := req.URL.Query().Get("watch"); w == "true" || w == "1" {
			return "WATCH"
		}
		if _, named, ok := parse(req.URL.Path); ok && !named {
			return "LIST"
		}
	}
	return req.Method
}

// Resource returns the resource (and subresource) an API path addresses:
// "/api/v1/namespaces/ns/pods/p" → "pods",
// "/apis/lull.dev/v1alpha1/namespaces/ns/sessions/s/status" →
// "sessions/status". Paths outside /api and /apis return "other".
func Resource(path string) string {
	resource, _, ok := parse(path)
	if !ok {
		return "other"
	}
	return resource
}

// parse splits an API path into its resource (with subresource) and
// whether it names one object; ok is false for paths that address no
// resource ("/healthz", "/apis").
func parse(path string) (resource string, named, ok bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return "", false, false
	}
	if len(parts) >= 2 && parts[0] == "namespaces" {
		switch {
		case len(parts) == 2:
			return "namespaces", true, true
		case len(parts) == 3 && (parts[2] == "status" || parts[2] == "finalize"):
			// A namespace's own subresources, not a collection in it.
			return "namespaces/" + parts[2], true, true
		}
		parts = parts[2:]
	}
	switch len(parts) {
	case 0:
		return "", false, false
	case 1:
		return parts[0], false, true
	case 2:
		return parts[0], true, true
	default:
		return parts[0] + "/" + parts[2], true, true
	}
}
