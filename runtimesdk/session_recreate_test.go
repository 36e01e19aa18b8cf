package runtimesdk

import (
	"testing"
	"testing/synctest"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// A runtime whose Session is deleted (an idle cull's delete, kubectl delete
// with --cascade=orphan leaving the pod running) waits for a Session of
// that name to exist again with one watch from the current state, without
// reading it again and again: a GET retried with backoff would cost one
// request every 10 s for as long as the pod outlives its Session. When the
// Session is created again, the runtime acts on it: here, a drain request
// for its pod.
func TestDeletedSessionIsAwaitedWithAWatchNotPolled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSession()
		startRuntime(t, f)
		wantReport(t, f, "the first report", isState(lullv1.RuntimeServing, ""))
		settled(t, "the watch is open", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.watchers) == 1 })

		before := f.requests()
		f.deleteSession()
		// With a Get retried under the read backoff (200 ms, doubling, ±50 %),
		// at least three reads fall within 3 s; the clock moves a tenth of a
		// second at a time, so that each would be made.
		for range 30 {
			advance(f.clock, 100*time.Millisecond)
		}
		if n := f.requests() - before; n > 1 {
			f.mu.Lock()
			t.Errorf("the runtime made %d requests in the 3 s after its Session was deleted (%d reads, watches from %q), want one watch", n, f.gets, f.watchRVs)
			f.mu.Unlock()
		}

		f.createAgain("uid-2", lullv1.SessionStatus{PodUID: testPod, Phase: lullv1.SessionRunning,
			Drain: &lullv1.DrainRequest{RequestID: req1, PodUID: testPod, Reason: lullv1.DrainReasonUpdate, RequestedAt: metav1.NewTime(f.clock.Now())}})
		// The new Session holds no report: the runtime takes its report for
		// overwritten, and writes after the pause before a rewrite (1 s,
		// ±50 %).
		advance(f.clock, 1500*time.Millisecond)
		wantReport(t, f, "Drained for the new Session's request", isState(lullv1.RuntimeDrained, req1))
	})
}
