package turnrunner

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// apiServer is a TLS server answering every request as the API server
// would: code, with a Status naming user (for a 403). It fails the test
// if a request carries credentials.
func apiServer(t *testing.T, code int, user string) *httptest.Server {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := r.Header.Get("Authorization"); a != "" {
			t.Errorf("the probe sent credentials: Authorization %q", a)
		}
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			t.Error("the probe sent a client certificate")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		switch code {
		case http.StatusUnauthorized:
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`)
		case http.StatusForbidden:
			fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods is forbidden: User \"%s\" cannot list resource \"pods\" in API group \"\" in the namespace \"ns\"","reason":"Forbidden","code":403}`, user)
		default:
			fmt.Fprint(w, `{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[]}`)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// runSelfCheck runs `example-runtime selfcheck` through Main with args and
// env, and returns its lines and its error.
func runSelfCheck(t *testing.T, env []string, args ...string) ([]string, error) {
	t.Helper()
	var out bytes.Buffer
	err := Main(t.Context(), Process{Args: append([]string{SelfCheckCommand}, args...), Env: env, Stdout: &out})
	return strings.Split(strings.TrimSpace(out.String()), "\n"), err
}

// noTokenPaths are two token paths in a fresh directory where nothing is.
func noTokenPaths(t *testing.T) []string {
	dir := t.TempDir()
	return []string{"--token-path=" + filepath.Join(dir, "var/run/secrets/kubernetes.io/serviceaccount"), "--token-path=" + filepath.Join(dir, "run/secrets/kubernetes.io")}
}

func TestSelfCheckHoldsWithoutATokenWhenTheAPIServerRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		code       int
	}{
		{"401: no anonymous access", "→ 401 Unauthorized", http.StatusUnauthorized},
		{"403 for system:anonymous", "→ 403 Forbidden for system:anonymous", http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := apiServer(t, tc.code, "system:anonymous")
			lines, err := runSelfCheck(t, nil, append(noTokenPaths(t), "--api-url="+srv.URL+"/api/v1/namespaces/ns/pods")...)
			if err != nil {
				t.Fatalf("selfcheck failed: %v\n%s", err, strings.Join(lines, "\n"))
			}
			if len(lines) != 3 {
				t.Fatalf("%d lines, want one per check (3):\n%s", len(lines), strings.Join(lines, "\n"))
			}
			for _, l := range lines {
				if !strings.HasPrefix(l, "ok ") {
					t.Errorf("line %q does not hold", l)
				}
			}
			if !strings.Contains(lines[2], tc.want) {
				t.Errorf("probe line %q lacks %q", lines[2], tc.want)
			}
		})
	}
}

func TestSelfCheckFailsWhenATokenIsMounted(t *testing.T) {
	dir := t.TempDir()
	sa := filepath.Join(dir, "serviceaccount")
	if err := os.Mkdir(sa, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sa, "token"), []byte("eyJ..."), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := apiServer(t, http.StatusUnauthorized, "")
	lines, err := runSelfCheck(t, nil, "--token-path="+sa, "--token-path="+filepath.Join(dir, "absent"), "--api-url="+srv.URL)
	if err == nil {
		t.Fatalf("selfcheck held with a token at %s:\n%s", sa, strings.Join(lines, "\n"))
	}
	if !strings.HasPrefix(lines[0], "FAIL ") || !strings.Contains(lines[0], sa+" holds token") {
		t.Errorf("first line %q does not name the token", lines[0])
	}
	if !strings.HasPrefix(lines[1], "ok ") || !strings.HasPrefix(lines[2], "ok ") {
		t.Errorf("the other checks should hold:\n%s", strings.Join(lines, "\n"))
	}
	if !strings.Contains(err.Error(), "1 of 3 checks failed") {
		t.Errorf("error %q does not count the failure", err)
	}
}

// Even an empty directory where a token would be mounted is reported: it
// is a mount point in the making, and "nothing there" is the guarantee.
func TestSelfCheckFailsOnAnEmptyTokenDirectory(t *testing.T) {
	dir := t.TempDir()
	srv := apiServer(t, http.StatusUnauthorized, "")
	lines, err := runSelfCheck(t, nil, "--token-path="+dir, "--api-url="+srv.URL)
	if err == nil || !strings.HasPrefix(lines[0], "FAIL ") {
		t.Fatalf("selfcheck held with a directory at %s (%v):\n%s", dir, err, strings.Join(lines, "\n"))
	}
}

func TestSelfCheckFailsWhenTheAPIServerDoesNotRefuse(t *testing.T) {
	for _, tc := range []struct {
		name, user, want string
		code             int
	}{
		{"200: anonymous may list pods", "", "200 OK: answered without credentials", http.StatusOK},
		{"403 for an authenticated user", "system:serviceaccount:ns:lull-runtime-s", "for someone other than system:anonymous", http.StatusForbidden},
		{"404: not the API server's refusal", "", "404 Not Found, want 401 or 403", http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := apiServer(t, tc.code, tc.user)
			lines, err := runSelfCheck(t, nil, append(noTokenPaths(t), "--api-url="+srv.URL)...)
			if err == nil {
				t.Fatalf("selfcheck held:\n%s", strings.Join(lines, "\n"))
			}
			if !strings.HasPrefix(lines[2], "FAIL ") || !strings.Contains(lines[2], tc.want) {
				t.Errorf("probe line %q, want a FAIL with %q", lines[2], tc.want)
			}
		})
	}
}

// A 401 that is not a Kubernetes Status came from something else than
// the API server (a proxy, another service on the address).
func TestSelfCheckFailsOnARefusalThatIsNotTheAPIServers(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "go away", http.StatusUnauthorized)
	}))
	defer srv.Close()
	lines, err := runSelfCheck(t, nil, append(noTokenPaths(t), "--api-url="+srv.URL)...)
	if err == nil || !strings.Contains(lines[2], "without a Kubernetes Status") {
		t.Fatalf("selfcheck (%v):\n%s", err, strings.Join(lines, "\n"))
	}
}

// A connection error is no refusal: the check is that the API server is
// reached and refuses.
func TestSelfCheckFailsWhenTheAPIServerIsNotReached(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	u := srv.URL
	srv.Close()
	lines, err := runSelfCheck(t, nil, append(noTokenPaths(t), "--api-url="+u, "--timeout=2s")...)
	if err == nil {
		t.Fatalf("selfcheck held with no server at %s:\n%s", u, strings.Join(lines, "\n"))
	}
	if !strings.HasPrefix(lines[2], "FAIL ") || !strings.Contains(lines[2], "did not reach it") {
		t.Errorf("probe line %q, want a FAIL naming the connection", lines[2])
	}
}

// Without --api-url the probe asks the kubernetes Service the kubelet
// names in the container's environment, for the pods of the session's
// namespace that lull names.
func TestSelfCheckProbesTheKubernetesServiceForTheSessionsPods(t *testing.T) {
	srv := apiServer(t, http.StatusForbidden, "system:anonymous")
	host, port, _ := strings.Cut(strings.TrimPrefix(srv.URL, "https://"), ":")
	env := []string{"KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port, "LULL_SESSION_NAMESPACE=team-a"}
	lines, err := runSelfCheck(t, env, noTokenPaths(t)...)
	if err != nil {
		t.Fatalf("selfcheck failed: %v\n%s", err, strings.Join(lines, "\n"))
	}
	want := "GET https://" + host + ":" + port + "/api/v1/namespaces/team-a/pods"
	if !strings.Contains(lines[2], want) {
		t.Errorf("probe line %q does not ask %s", lines[2], want)
	}

	lines, err = runSelfCheck(t, nil, noTokenPaths(t)...)
	if err == nil || !strings.Contains(lines[2], "KUBERNETES_SERVICE_HOST") {
		t.Errorf("outside a pod, the probe should fail naming the missing variable (%v):\n%s", err, strings.Join(lines, "\n"))
	}
}

func TestPodsURLJoinsAnIPv6ServiceHost(t *testing.T) {
	env := map[string]string{"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443", "LULL_SESSION_NAMESPACE": "ns"}
	got, err := podsURL(func(k string) string { return env[k] })
	if want := "https://[fd00::1]:443/api/v1/namespaces/ns/pods"; err != nil || got != want {
		t.Errorf("podsURL = %q, %v; want %q", got, err, want)
	}
}

// The check's flags are its own: a mistyped one is an error, where the
// runtime ignores flags it does not know (they are meant for another image).
func TestSelfCheckRefusesUnknownFlags(t *testing.T) {
	if _, err := runSelfCheck(t, nil, "--token-paht=/x"); err == nil {
		t.Error("selfcheck accepted an unknown flag")
	}
}
