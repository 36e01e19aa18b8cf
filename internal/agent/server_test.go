package agent

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serve runs a Server for g on ln until the returned stop is called; stop
// reports Serve's result.
func serve(t *testing.T, g Gate, ln net.Listener) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	srv := openServer(t, g)
	go func() { done <- srv.Serve(ctx, ln) }()
	return func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			return errors.New("Serve did not return")
		}
	}
}

func unixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		},
	}}
}

func TestUnixSocketMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := ListenMode("unix://"+path, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o666 {
		t.Errorf("socket %v (%v), want mode 0666", fi, err)
	}
}

func TestUnixSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := Listen("unix://" + path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&fs.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
		t.Errorf("socket %v (%v), want a socket with mode 0660", fi, err)
	}
	stop := serve(t, servingGate(), ln)

	if _, err := Listen("unix://" + path); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Errorf("Listen on a live socket = %v, want an error", err)
	}
	c := unixClient(path)
	if code, _, b := call(t, c, "GET", "http://agent/healthz", ""); code != http.StatusOK {
		t.Errorf("GET /healthz over the socket = %d %s", code, b)
	}
	code, _, b := call(t, c, "POST", "http://agent/v1/turns", `{"lease":"1m"}`)
	if code != http.StatusCreated {
		t.Fatalf("POST /v1/turns over the socket = %d %s", code, b)
	}
	id := decode[turnResponse](t, b).ID
	if code, _, _ := call(t, c, "DELETE", "http://agent/v1/turns/"+id, ""); code != http.StatusNoContent {
		t.Errorf("DELETE over the socket = %d", code)
	}
	c.CloseIdleConnections()
	if err := stop(); err != nil {
		t.Errorf("Serve = %v, want nil after its context ends", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket left behind after stop: %v", err)
	}
}

func TestUnixSocketReplacesStaleSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.sock")
	old, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	old.(*net.UnixListener).SetUnlinkOnClose(false)
	old.Close() // as if the agent had crashed
	ln, err := Listen("unix://" + path)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	ln.Close()

	if err := os.WriteFile(path, []byte("not a socket"), 0o600); err != nil {
		t.Fatal(err)
	}
	if ln, err := Listen("unix://" + path); err == nil {
		ln.Close()
		t.Error("Listen replaced a regular file")
	}
}

func TestListenOnlyLocally(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "localhost:0", "[::1]:0"} {
		ln, err := Listen(addr)
		if err != nil {
			if addr == "[::1]:0" && strings.Contains(err.Error(), "assign") {
				continue // no IPv6 here
			}
			t.Errorf("Listen(%q): %v", addr, err)
			continue
		}
		ln.Close()
	}
	for _, addr := range []string{":8377", "0.0.0.0:8377", "[::]:8377", "10.1.2.3:8377", "example.com:8377", "127.0.0.1", "unix://"} {
		if ln, err := Listen(addr); err == nil {
			ln.Close()
			t.Errorf("Listen(%q) succeeded, want it refused", addr)
		}
	}
}

func TestServeStopsWithOpenStreams(t *testing.T) {
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := serve(t, servingGate(), ln)
	resp, err := http.Get("http://" + ln.Addr().String() + "/v1/drain/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 1)
	if _, err := resp.Body.Read(buf); err != nil { // the first event has begun
		t.Fatal(err)
	}
	start := time.Now()
	if err := stop(); err != nil {
		t.Errorf("Serve = %v", err)
	}
	if d := time.Since(start); d > shutdownTimeout/2 {
		t.Errorf("stop took %v with a stream open", d)
	}
}
