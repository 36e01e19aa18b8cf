package turnrunner

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// SelfCheckCommand is the first argument that makes Main check what the
// runtime can reach instead of taking turns: `example-runtime selfcheck`,
// which a user runs by hand in a session's runtime container
// (`kubectl exec <pod> -c runtime -- example-runtime selfcheck`).
const SelfCheckCommand = "selfcheck"

// TokenPaths are where Kubernetes clients look for a ServiceAccount
// token: client-go's in-cluster path, and the /run path that /var/run
// links to in most images but need not in the runtime's. With the agent
// sidecar, the runtime container must have nothing at either.
var TokenPaths = []string{"/var/run/secrets/kubernetes.io/serviceaccount", "/run/secrets/kubernetes.io"}

// check is one line of the self-check: what holds or fails, and why.
type check struct {
	ok   bool
	line string
}

func (c check) String() string {
	if c.ok {
		return "ok    " + c.line
	}
	return "FAIL  " + c.line
}

// selfCheck parses the self-check's flags (args after "selfcheck"), runs
// its checks, writes one line per check to stdout, and returns an error
// naming how many failed, so that the command exits 0 only if all hold.
func selfCheck(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	flags := pflag.NewFlagSet("example-runtime selfcheck", pflag.ContinueOnError)
	flags.SetOutput(io.Discard)
	tokenPaths := flags.StringSlice("token-path", TokenPaths, "paths at which nothing may exist: where a ServiceAccount token would be mounted")
	apiURL := flags.String("api-url", "", "the URL asked without credentials (default: the namespace's pods at the kubernetes Service, https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/api/v1/namespaces/$"+lullv1.EnvSessionNamespace+"/pods)")
	timeout := flags.Duration("timeout", 10*time.Second, "how long the API server has to answer")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintln(stdout, "Usage: example-runtime selfcheck [flags]\n\nChecks that this container holds no ServiceAccount token and that the API\nserver refuses a request without one. Exits 0 only if both hold.\n\nFlags:")
			flags.SetOutput(stdout)
			flags.PrintDefaults()
			return nil
		}
		return fmt.Errorf("%s: %w", SelfCheckCommand, err)
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("%s takes no arguments, got %q", SelfCheckCommand, flags.Args())
	}
	var checks []check
	for _, p := range *tokenPaths {
		checks = append(checks, checkNothingAt(p))
	}
	u := *apiURL
	if u == "" {
		var err error
		if u, err = podsURL(getenv); err != nil {
			checks = append(checks, check{line: "the API server refuses a request without credentials: " + err.Error()})
		}
	}
	if u != "" {
		checks = append(checks, probeWithoutCredentials(ctx, u, *timeout))
	}
	failed := 0
	for _, c := range checks {
		fmt.Fprintln(stdout, c)
		if !c.ok {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%s: %d of %d checks failed", SelfCheckCommand, failed, len(checks))
	}
	return nil
}

// checkNothingAt holds when nothing exists at path: not a token, and not
// an empty directory either, since a mount point there is the start of one.
func checkNothingAt(path string) check {
	_, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		return check{ok: true, line: "no ServiceAccount token: nothing at " + path}
	case err != nil:
		return check{line: fmt.Sprintf("cannot tell whether %s holds a ServiceAccount token: %v", path, err)}
	}
	entries, err := os.ReadDir(path)
	var names []string
	for _, e := range entries {
		// The kubelet's atomic writer keeps its versions in "..data" and
		// "..<time>": not what the user needs to read.
		if !strings.HasPrefix(e.Name(), "..") {
			names = append(names, e.Name())
		}
	}
	if err != nil || len(names) == 0 {
		return check{line: path + " exists: a ServiceAccount token may be mounted there"}
	}
	return check{line: fmt.Sprintf("%s holds %s: this container can act as the session's ServiceAccount", path, strings.Join(names, ", "))}
}

// podsURL is the URL of the pods of the session's namespace at the
// kubernetes Service, from the variables the kubelet and lull set in the
// container: a list any credential of the session could be asked about,
// and that no anonymous request may see.
func podsURL(getenv func(string) string) (string, error) {
	host, port := getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return "", errors.New("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set (not in a pod?): give --api-url")
	}
	ns := getenv(lullv1.EnvSessionNamespace)
	if ns == "" {
		return "", errors.New(lullv1.EnvSessionNamespace + " is not set (not in a session pod?): give --api-url")
	}
	return (&url.URL{Scheme: "https", Host: net.JoinHostPort(host, port), Path: "/api/v1/namespaces/" + ns + "/pods"}).String(), nil
}

// probeWithoutCredentials GETs u with no credentials and holds when the
// API server answers 401, or 403 for system:anonymous, with a Kubernetes
// Status. Anything else fails, a connection error included: the check is
// that the API server is reached and refuses.
//
// The server's certificate is not verified: the cluster CA is not mounted
// in the container either, and what is checked is that the server
// refuses, not who it is. No credential is sent, so none can leak to an
// impostor.
func probeWithoutCredentials(ctx context.Context, u string, timeout time.Duration) check {
	const what = "the API server refuses a request without credentials"
	client := &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // see above: no CA to verify with, nothing sent to protect
			Proxy:           nil,                                   // the container's own reach, not a proxy's
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return check{line: fmt.Sprintf("%s: %v", what, err)}
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is on the line already
		}
		return check{line: fmt.Sprintf("%s: GET %s did not reach it: %v", what, u, err)}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	ok, why := judgeRefusal(resp.StatusCode, body)
	return check{ok: ok, line: fmt.Sprintf("%s: GET %s (certificate not verified) → %s", what, u, why)}
}

// anonymousUser is the user the API server takes a request without
// credentials for, when it admits anonymous requests at all.
const anonymousUser = "system:anonymous"

// judgeRefusal judges the API server's answer to a request without
// credentials: 401 (no anonymous access), or 403 naming system:anonymous
// (anonymous access, but no right to the pods). A 403 naming another user
// means the request was authenticated after all; an answer that is not a
// Kubernetes Status did not come from an API server.
func judgeRefusal(code int, body []byte) (ok bool, why string) {
	status := fmt.Sprintf("%d %s", code, http.StatusText(code))
	var s struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
	}
	isStatus := json.Unmarshal(body, &s) == nil && s.Kind == "Status"
	switch {
	case code >= 200 && code < 300:
		return false, status + ": answered without credentials"
	case code != http.StatusUnauthorized && code != http.StatusForbidden:
		return false, status + ", want 401 or 403"
	case !isStatus:
		return false, status + " without a Kubernetes Status: not the API server's answer"
	case code == http.StatusForbidden && !strings.Contains(s.Message, `"`+anonymousUser+`"`):
		return false, fmt.Sprintf("%s for someone other than %s, so the request carried credentials: %s", status, anonymousUser, s.Message)
	case code == http.StatusForbidden:
		return true, status + " for " + anonymousUser
	}
	return true, status
}
