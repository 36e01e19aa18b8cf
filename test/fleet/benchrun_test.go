package fleet

import (
	"bytes"
	"context"
	"testing"
	"time"

	"lull.dev/lull/internal/dev/bench"
	"lull.dev/lull/internal/dev/podprocess"
)

// lull bench's run, small: the floors (a raw rollout of as many plain
// StatefulSets, the protocol floor, the write→watch latency), a rollout
// of 20 idle sessions and an idle window all yield their figures, and the
// runtimes' requests are counted through the fleet's transport. Figures only: targets are
// for `lull bench` at scale, not for this test.
func TestBenchRunReportsEveryFigure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const n = 20
	var out bytes.Buffer
	r, err := bench.Run(ctx, env, bench.Options{Namespace: "bench-run", Sessions: n, IdleWindow: 2 * time.Second,
		WatchWrites: 50, Out: &out, Runtimes: podprocess.ModeFleet})
	defer func() { t.Log("\n" + out.String()) }()
	if err != nil {
		t.Fatal(err)
	}
	r.Print(&out)

	if r.Raw.Sets != n || r.Raw.Rollout <= 0 || r.Raw.Setup <= 0 || r.Raw.Teardown <= 0 {
		t.Errorf("raw rollout %+v: want %d sets and every duration positive", r.Raw, n)
	}
	if len(r.WatchFloor) != 50 || bench.Percentile(r.WatchFloor, 99) <= 0 {
		t.Errorf("write→watch floor: %d latencies, p99 %s; want 50, positive", len(r.WatchFloor), bench.Percentile(r.WatchFloor, 99))
	}
	if r.Converge <= 0 || r.RolloutRatio() <= 0 || r.ReportToDeleteRatio() <= 0 {
		t.Errorf("converge %s, ratios %.2f and %.2f: want positive", r.Converge, r.RolloutRatio(), r.ReportToDeleteRatio())
	}
	if r.Replaced != n || len(r.ReportToDelete) != n || len(r.Violations) != 0 {
		t.Errorf("%d replaced, %d Drained report → delete latencies, violations %v; want %d, %d, none", r.Replaced, len(r.ReportToDelete), r.Violations, n, n)
	}
	if r.Writes["DELETE pods"] < n {
		t.Errorf("controller writes %v: want at least %d pod deletes", r.Writes, n)
	}
	if _, ok := r.QueueDepth["session"]; !ok {
		t.Errorf("queue depth by controller %v: no session queue sampled", r.QueueDepth)
	}
	if h := r.ReconcileTime["session"]; h.Count() < n {
		t.Errorf("session reconciles during the rollout: %v, want at least %d", h.Count(), n)
	}
	if h := r.QueueWait["session"]; h.Count() < n {
		t.Errorf("session queue waits during the rollout: %v, want at least %d", h.Count(), n)
	}
	if r.PeakRSS <= 0 || r.CPU <= 0 {
		t.Errorf("controller peak RSS %d, CPU %s: want positive", r.PeakRSS, r.CPU)
	}
	if r.IdleWindow != 2*time.Second || r.IdleController == nil || r.IdleRuntimes == nil {
		t.Errorf("idle window %s, counts %v and %v: want 2s and both counted", r.IdleWindow, r.IdleController, r.IdleRuntimes)
	}
	// Every runtime, old pod's and new, opened its Session watch through
	// the fleet's transport and reported through it.
	reqs := env.Runner.RuntimeRequests()
	if reqs["WATCH sessions"] < 2*n || reqs["PATCH sessions/status"] < 2*n {
		t.Errorf("runtime requests %v: want at least %d Session watches and status patches", reqs, 2*n)
	}
	if r.Protocol.Sessions != n || r.Protocol.Rollout <= 0 || r.Protocol.Reported < r.Protocol.Rollout || r.Protocol.Setup <= 0 || r.Protocol.Teardown <= 0 || r.ProtocolRatio() <= 0 {
		t.Errorf("protocol floor %+v, ratio %.2f: want %d sessions, every duration positive, reported no sooner than moved", r.Protocol, r.ProtocolRatio(), n)
	}
	if len(r.Phases) != 7 {
		t.Errorf("phases %v, want raw rollout floor, protocol floor, start, write→watch floor, rollout, settle, idle window", r.Phases)
	}
}
