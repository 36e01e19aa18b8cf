package fleet

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"lull.dev/lull/internal/dev/bench"
	"lull.dev/lull/internal/dev/podprocess"
)

// The controller is killed (SIGKILL) while 10 of 50 busy sessions have a
// drain request outstanding, and started again: the new process finds
// every status right and writes none, keeps every request byte for byte
// (none re-issued with a new ID, none withdrawn) and admits no session
// beyond the wave it finds — what `lull bench restart` measures at scale.
func TestControllerRestartAtScale(t *testing.T) {
	const ns = "fleet-restart"
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	})
	r, err := bench.RunRestart(context.Background(), env, bench.RestartOptions{
		Namespace: ns, Sessions: 50, MidDrain: 10, Timeout: 2 * time.Minute, Window: time.Minute,
		Out: testWriter{t}, Runtimes: podprocess.ModeFleet,
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Print(testWriter{t})
	for _, c := range r.Checks() {
		if !c.OK {
			t.Errorf("target missed: %s", c.Name)
		}
	}
	if len(r.Requests.Kept) != 10 {
		t.Errorf("%d drain requests kept across the restart, want 10: %+v", len(r.Requests.Kept), r.Requests)
	}
	if r.Ready <= 0 || r.FirstReconcile <= 0 {
		t.Errorf("restart not timed: ready %s, first reconcile %s", r.Ready, r.FirstReconcile)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
