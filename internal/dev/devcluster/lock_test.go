package devcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// A second Start on a state directory in use fails at once and touches
// nothing; once the first cluster has stopped, the directory can be used
// again.
func TestStateDirLock(t *testing.T) {
	dir := t.TempDir()
	start := func(prefix string) (*Cluster, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		return Start(ctx, Options{StateDir: dir, Progress: logWriter{t, prefix}})
	}
	first, err := start("[first] ")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { first.Stop() })
	ca, err := os.ReadFile(first.CAFile)
	if err != nil {
		t.Fatal(err)
	}

	t0 := time.Now()
	second, err := start("[second] ")
	if err == nil {
		second.Stop()
		t.Fatal("second Start on a state dir in use succeeded")
	}
	t.Logf("second Start failed in %s: %v", time.Since(t0).Round(time.Millisecond), err)
	want := fmt.Sprintf("state dir %s is in use by another lull dev (pid %d); stop it or choose another --state-dir", dir, os.Getpid())
	if err.Error() != want {
		t.Errorf("error %q\nwant  %q", err, want)
	}
	if !errors.Is(err, ErrStateDirInUse) {
		t.Errorf("error does not match ErrStateDirInUse: %v", err)
	}
	if d := time.Since(t0); d > time.Second {
		t.Errorf("second Start took %s to fail", d)
	}
	// The first cluster is untouched: same CA, etcd data intact, still
	// serving.
	if now, err := os.ReadFile(first.CAFile); err != nil || !bytes.Equal(now, ca) {
		t.Errorf("CA changed under the running cluster (err %v)", err)
	}
	if err := first.Healthy(); err != nil {
		t.Errorf("first cluster unhealthy: %v", err)
	}
	if _, err := kubernetes.NewForConfigOrDie(first.Config).CoreV1().Namespaces().Get(t.Context(), "default", metav1.GetOptions{}); err != nil {
		t.Errorf("first cluster stopped serving: %v", err)
	}

	if err := first.Stop(); err != nil {
		t.Fatalf("stop first: %v", err)
	}
	second, err = start("[second] ")
	if err != nil {
		t.Fatalf("Start after the first cluster stopped: %v", err)
	}
	t.Cleanup(func() { second.Stop() })
	if b, err := os.ReadFile(dir + "/lock"); err != nil || strings.TrimSpace(string(b)) != fmt.Sprint(os.Getpid()) {
		t.Errorf("lock file holds %q (%v), want this pid", b, err)
	}
	if err := second.Stop(); err != nil {
		t.Errorf("stop second: %v", err)
	}
}
