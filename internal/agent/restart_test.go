package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
	"lull.dev/lull/runtimesdk"
)

// fakeAPIServer serves the part of the Kubernetes API a runtime uses, for
// one Session ns/s1: get it, watch it (a watch that sends nothing), and
// patch its status with a runtime report, which it records.
type fakeAPIServer struct {
	mu      sync.Mutex
	session lullv1.Session
	reports []*lullv1.RuntimeReport
}

const sessionsPath = "/apis/lull.dev/v1alpha1/namespaces/ns/sessions"

func (f *fakeAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == sessionsPath+"/s1":
		f.writeSession(w)
	case r.Method == http.MethodGet && r.URL.Path == sessionsPath && r.URL.Query().Get("watch") == "true":
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	case r.Method == http.MethodPatch && r.URL.Path == sessionsPath+"/s1/status":
		b, err := io.ReadAll(r.Body)
		if err == nil {
			b, err = f.checkPrecondition(b)
		}
		report, derr := drain.DecodeReport(b)
		if err = errors.Join(err, derr); err != nil {
			http.Error(w, err.Error(), http.StatusUnprocessableEntity)
			return
		}
		f.mu.Lock()
		f.reports = append(f.reports, report)
		f.session.Status.Runtime = report
		f.mu.Unlock()
		f.writeSession(w)
	default:
		http.Error(w, "not served by the fake: "+r.Method+" "+r.URL.String(), http.StatusNotFound)
	}
}

// checkPrecondition takes a resourceVersion precondition out of a merge
// patch, as the API server does, and refuses a stale one. The fake's
// session never changes version.
func (f *fakeAPIServer) checkPrecondition(patch []byte) ([]byte, error) {
	var body map[string]json.RawMessage
	if err := json.Unmarshal(patch, &body); err != nil {
		return nil, err
	}
	meta, ok := body["metadata"]
	if !ok {
		return patch, nil
	}
	var m struct {
		ResourceVersion string `json:"resourceVersion"`
	}
	if err := json.Unmarshal(meta, &m); err != nil {
		return nil, err
	}
	f.mu.Lock()
	current := f.session.ResourceVersion
	f.mu.Unlock()
	if m.ResourceVersion != current {
		return nil, fmt.Errorf("precondition resourceVersion %s, session is at %s", m.ResourceVersion, current)
	}
	delete(body, "metadata")
	return json.Marshal(body)
}

func (f *fakeAPIServer) writeSession(w http.ResponseWriter) {
	f.mu.Lock()
	b, err := json.Marshal(&f.session)
	f.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b) //nolint:errcheck // the client is gone
}

// reportsSince returns the reports landed after the first n.
func (f *fakeAPIServer) reportsSince(n int) []*lullv1.RuntimeReport {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*lullv1.RuntimeReport(nil), f.reports[n:]...)
}

// startFakeAPI serves a fakeAPIServer and points the runtime's environment
// (LULL_* and KUBECONFIG) at it, for a pod with UID testPod.
func startFakeAPI(t *testing.T) *fakeAPIServer {
	t.Helper()
	f := &fakeAPIServer{session: lullv1.Session{
		TypeMeta:   metav1.TypeMeta{APIVersion: lullv1.GroupVersion.String(), Kind: "Session"},
		ObjectMeta: metav1.ObjectMeta{Name: "s1", Namespace: "ns", ResourceVersion: "1"},
		Status:     lullv1.SessionStatus{PodUID: testPod, Phase: lullv1.SessionRunning},
	}}
	srv := httptest.NewServer(f)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	err := os.WriteFile(kubeconfig, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q}}]
users: [{name: runtime, user: {token: fake}}]
contexts: [{name: fake, context: {cluster: fake, user: runtime}}]
current-context: fake
`, srv.URL), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kubeconfig)
	t.Setenv(lullv1.EnvSessionName, "s1")
	t.Setenv(lullv1.EnvSessionNamespace, "ns")
	t.Setenv(lullv1.EnvPodName, "s1-0")
	t.Setenv(lullv1.EnvPodUID, testPod)
	return f
}

// runAgent runs `lull agent` with o until the returned stop is called;
// stop reports Run's result.
func runAgent(t *testing.T, o Options) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			return errors.New("Run did not return")
		}
	}
	t.Cleanup(func() { stop() }) //nolint:errcheck // reported where the test stops it
	return stop
}

// waitDrainState polls GET /v1/drain until ok holds or a few seconds pass.
func waitDrainState(t *testing.T, c *http.Client, what string, ok func(runtimesdk.Snapshot) bool) runtimesdk.Snapshot {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := c.Get("http://agent/v1/drain")
		if err == nil {
			var s runtimesdk.Snapshot
			err = json.NewDecoder(resp.Body).Decode(&s)
			resp.Body.Close()
			if err == nil && ok(s) {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (last error %v)", what, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRestartedAgentKeepsTheRuntimesTurns: the agent's container restarts
// while the runtime's goes on holding a turn, and a drain request for the
// pod is outstanding. The restarted agent must report Draining with the
// turn, not Drained (the controller would delete the pod under the turn),
// until the runtime ends the turn through the API.
func TestRestartedAgentKeepsTheRuntimesTurns(t *testing.T) {
	f := startFakeAPI(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	o := Options{Listen: "unix://" + sock, StateFile: filepath.Join(dir, "agent-turns.json"), Log: quiet}
	c := unixClient(sock)
	defer c.CloseIdleConnections()

	stop := runAgent(t, o)
	waitDrainState(t, c, "the agent to serve", func(s runtimesdk.Snapshot) bool { return s.Accepting })
	code, _, b := call(t, c, "POST", "http://agent/v1/turns", "")
	if code != http.StatusCreated {
		t.Fatalf("POST /v1/turns = %d %s", code, b)
	}
	id := decode[turnResponse](t, b).ID
	c.CloseIdleConnections()
	if err := stop(); err != nil {
		t.Fatalf("first agent: %v", err)
	}

	// While the agent is down, the controller asks the pod to drain.
	f.mu.Lock()
	f.session.Status.Drain = &lullv1.DrainRequest{RequestID: req1, PodUID: testPod, Reason: lullv1.DrainReasonUpdate, RequestedAt: metav1.Now()}
	n := len(f.reports)
	f.mu.Unlock()

	stop = runAgent(t, o)
	s := waitDrainState(t, c, "the restarted agent to see the request", func(s runtimesdk.Snapshot) bool { return s.RequestID == req1 })
	if s.State != lullv1.RuntimeDraining || s.ActiveTurns != 1 {
		t.Errorf("restarted agent's drain state %+v, want Draining with 1 active turn", s)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(f.reportsSince(n)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the restarted agent wrote no report")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // time for a wrong Drained to land
	for i, r := range f.reportsSince(n) {
		if r.State != lullv1.RuntimeDraining || r.RequestID != req1 || r.ActiveTurns != 1 {
			t.Fatalf("report %d of the restarted agent: %+v, want Draining for %s with 1 active turn", i, r, req1)
		}
	}

	// The runtime ends its turn, under the ID it was given before the restart.
	if code, _, b := call(t, c, "DELETE", "http://agent/v1/turns/"+id, ""); code != http.StatusNoContent {
		t.Fatalf("DELETE /v1/turns/%s after the restart = %d %s, want 204", id, code, b)
	}
	deadline = time.Now().Add(5 * time.Second)
	for {
		rs := f.reportsSince(n)
		if r := rs[len(rs)-1]; r.State == lullv1.RuntimeDrained {
			if r.RequestID != req1 || r.ActiveTurns != 0 {
				t.Errorf("Drained report %+v, want one for %s with 0 turns", r, req1)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Drained report after the turn ended: %+v", rs[len(rs)-1])
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.CloseIdleConnections()
	if err := stop(); err != nil {
		t.Errorf("restarted agent: %v", err)
	}
}
