package turnrunner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/journal"
	"lull.dev/lull/internal/dev/podprocess"
	"lull.dev/lull/runtimesdk"
)

// fakeAgent serves the agent sidecar's turn API on a unix socket and
// counts the turns begun through it.
type fakeAgent struct {
	socket string
	begun  atomic.Int32
}

func newFakeAgent(t *testing.T) *fakeAgent {
	t.Helper()
	a := &fakeAgent{socket: filepath.Join(t.TempDir(), "agent.sock")}
	l, err := net.Listen("unix", a.socket)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("POST /v1/turns", func(w http.ResponseWriter, _ *http.Request) {
		n := a.begun.Add(1)
		fmt.Fprintf(w, `{"id":"t-%016x"}`, n)
	})
	mux.HandleFunc("DELETE /v1/turns/{id}", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /v1/drain", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"accepting":true}`))
	})
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: mux}}
	srv.Start()
	t.Cleanup(srv.Close)
	return a
}

// podEnv is the environment the pod runner gives a runtime container of
// session name, pod uid.
func podEnv(name, uid string, extra ...string) []string {
	return append([]string{
		lullv1.EnvSessionName + "=" + name, lullv1.EnvSessionNamespace + "=ns",
		lullv1.EnvPodName + "=" + name + "-0", lullv1.EnvPodUID + "=" + uid,
	}, extra...)
}

// Two runtimes in one process, each with its own arguments and
// environment, share nothing: each takes its own number of turns through
// its own agent and journals them, under its own pod UID, to its own
// journal. Neither reads this process's environment.
func TestMainRuntimesInOneProcessDoNotShareState(t *testing.T) {
	dir := t.TempDir()
	decoy := filepath.Join(dir, "decoy.jsonl")
	t.Setenv(podprocess.EnvJournal, decoy)
	t.Setenv(lullv1.EnvPodUID, "uid-of-the-process")
	t.Setenv(lullv1.EnvAgentSocket, "/nonexistent.sock")

	type rt struct {
		name, uid string
		turns     int
		agent     *fakeAgent
		journal   string
		log       strings.Builder
	}
	rts := []*rt{{name: "a", uid: "uid-a", turns: 2}, {name: "b", uid: "uid-b", turns: 5}}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(rts))
	for i, r := range rts {
		r.agent = newFakeAgent(t)
		r.journal = filepath.Join(dir, r.name, "journal.jsonl")
		if err := os.Mkdir(filepath.Dir(r.journal), 0o755); err != nil {
			t.Fatal(err)
		}
		p := Process{
			Args:   []string{"--turn-min=0s", "--turn-max=1ms", "--think-max=1ms", fmt.Sprintf("--turns=%d", r.turns), "--model=" + r.name},
			Env:    podEnv(r.name, r.uid, lullv1.EnvAgentSocket+"="+r.agent.socket, podprocess.EnvJournal+"="+r.journal),
			Stderr: &syncWriter{w: &r.log},
		}
		wg.Go(func() { errs[i] = Main(ctx, p) })
	}
	for _, r := range rts {
		deadline := time.Now().Add(10 * time.Second)
		for ends(t, r.journal) < r.turns && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	time.Sleep(50 * time.Millisecond) // a runtime that took too many turns would show it now
	cancel()
	wg.Wait()

	for i, r := range rts {
		if errs[i] != nil {
			t.Errorf("runtime %s: Main = %v, want nil once its context is done", r.name, errs[i])
		}
		if n := int(r.agent.begun.Load()); n != r.turns {
			t.Errorf("runtime %s began %d turns through its agent, want its own --turns=%d", r.name, n, r.turns)
		}
		entries, err := journal.ReadDir(filepath.Dir(r.journal))
		if err != nil {
			t.Fatal(err)
		}
		if n := ends(t, r.journal); n != r.turns {
			t.Errorf("runtime %s journaled %d ended turns, want %d", r.name, n, r.turns)
		}
		for _, e := range entries {
			if string(e.PodUID) != r.uid || e.Session != r.name {
				t.Errorf("runtime %s journaled %+v, want only its own session and pod", r.name, e)
			}
		}
		if !strings.Contains(r.log.String(), "--model="+r.name) {
			t.Errorf("runtime %s's log does not name its own ignored argument:\n%s", r.name, r.log.String())
		}
	}
	if _, err := os.Stat(decoy); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a runtime journaled to the process's %s: %v", podprocess.EnvJournal, err)
	}
}

// Each runtime authenticates with the token of its own kubeconfig (named
// by KUBECONFIG in its environment, not the process's), also when its
// requests go through a transport shared by many runtimes.
func TestMainRuntimesShareATransportNotATokenOrWatch(t *testing.T) {
	var mu sync.Mutex
	seen := map[string][]string{} // token -> request paths
	// TLS: a kubeconfig's token is used only over TLS.
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		seen[tok] = append(seen[tok], r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 503})
	}))
	defer api.Close()
	t.Setenv("KUBECONFIG", "/nonexistent/kubeconfig")

	shared := &countingTransport{next: api.Client().Transport} // trusts the server
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for _, name := range []string{"a", "b"} {
		kc := filepath.Join(t.TempDir(), "kubeconfig")
		writeKubeconfig(t, kc, api.URL, "token-"+name)
		p := Process{
			Args:      []string{"--think-max=1h"},
			Env:       podEnv(name, "uid-"+name, "KUBECONFIG="+kc),
			Transport: shared,
		}
		wg.Go(func() {
			if err := Main(ctx, p); err != nil {
				t.Errorf("runtime %s: %v", name, err)
			}
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		a, b := seen["token-a"], seen["token-b"]
		mu.Unlock()
		if len(a) > 0 && len(b) > 0 {
			if a[0] != "/apis/lull.dev/v1alpha1/namespaces/ns/sessions/a" || b[0] != "/apis/lull.dev/v1alpha1/namespaces/ns/sessions/b" {
				t.Errorf("first requests %s (token-a), %s (token-b): each must read its own Session", a[0], b[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("requests by token after 10s: %v", seen)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for tok := range seen {
		if tok != "token-a" && tok != "token-b" {
			t.Errorf("a request authenticated with %q", tok)
		}
	}
	if n, total := shared.n.Load(), len(seen["token-a"])+len(seen["token-b"]); int(n) != total {
		t.Errorf("%d requests went through the shared transport, %d reached the server", n, total)
	}
}

// A runtime's environment is all it reads: without the LULL_* variables
// in it, it refuses to start, though this process has them.
func TestMainReadsOnlyItsOwnEnvironment(t *testing.T) {
	for _, k := range []string{lullv1.EnvSessionName, lullv1.EnvSessionNamespace, lullv1.EnvPodName, lullv1.EnvPodUID} {
		t.Setenv(k, "set-in-the-process")
	}
	err := Main(t.Context(), Process{Env: []string{"KUBECONFIG=/nonexistent"}})
	if err == nil || !strings.Contains(err.Error(), lullv1.EnvSessionName) || !strings.Contains(err.Error(), lullv1.EnvPodUID) {
		t.Errorf("Main with an empty environment = %v, want an error naming the missing variables", err)
	}
	err = Main(t.Context(), Process{Args: []string{"--turns=-1"}, Env: podEnv("a", "uid-a")})
	if err == nil || !strings.Contains(err.Error(), "--turns (-1) must not be negative") {
		t.Errorf("Main --turns=-1 = %v", err)
	}
	err = Main(t.Context(), Process{Env: podEnv("a", "uid-a", runtimesdk.EnvReportRefresh+"=soon", "KUBECONFIG=/nonexistent")})
	if err == nil || !strings.Contains(err.Error(), `LULL_REPORT_REFRESH="soon"`) {
		t.Errorf("Main with LULL_REPORT_REFRESH=soon = %v", err)
	}
}

func TestIgnoredArgs(t *testing.T) {
	fs := FlagSet(func(string) string { return "" })
	got := ignoredArgs(fs, []string{"--model=large", "--turn-min", "1s", "--gpu", "a100", "--verbose", "--think-max=2s", "-x", "serve", "--", "--turn-max=3s"})
	want := []string{"--model=large", "--gpu a100", "--verbose", "-x serve", "--turn-max=3s"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("ignored %q, want %q", got, want)
	}
	if got := ignoredArgs(fs, []string{"--turn-min=1s", "--turn-max", "2s"}); len(got) != 0 {
		t.Errorf("ignored %q of known flags", got)
	}
}

func ends(t *testing.T, path string) int {
	t.Helper()
	entries, err := journal.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if e.Event == journal.End {
			n++
		}
	}
	return n
}

func writeKubeconfig(t *testing.T, path, server, token string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: %q}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, server, token)), 0o600); err != nil {
		t.Fatal(err)
	}
}

type countingTransport struct {
	next http.RoundTripper
	n    atomic.Int32
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

type syncWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
