package e2e

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/scenario"
)

var (
	chaosSessions = flag.Int("chaos.sessions", 200, "sessions in TestChaosRollouts")
	chaosRollouts = flag.Int("chaos.rollouts", 10, "successive rollouts in TestChaosRollouts")
	chaosKillEach = flag.Duration("chaos.kill-every", 15*time.Second, "how often TestChaosRollouts kills the controller")
	chaosRestart  = flag.Bool("chaos.restart-apiserver", true, "restart the API server in the middle of TestChaosRollouts")
)

// Successive rollouts over a fleet of busy sessions while the controller is
// killed (SIGKILL) every 15 s and restarted, and the API server is
// restarted once in the middle of a rollout. Every rollout must converge,
// no turn may be interrupted, and the auditor must find no delete without a
// matching Drained report. The figures are printed for docs/faults.md.
func TestChaosRollouts(t *testing.T) {
	n, rollouts := *chaosSessions, *chaosRollouts
	ns, names, before := setup(t, n, "--turn-min=500ms", "--turn-max=3s", "--think-max=1s")
	ctx := context.Background()

	// The killer: SIGKILL the controller every chaos.kill-every, start it
	// again a second later.
	var (
		mu    sync.Mutex
		kills int
	)
	stop := make(chan struct{})
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		for {
			select {
			case <-stop:
				return
			case <-time.After(*chaosKillEach):
			}
			env.KillController()
			mu.Lock()
			kills++
			mu.Unlock()
			time.Sleep(time.Second)
			for env.StartController(ctx) != nil {
				time.Sleep(time.Second) // the API server may be restarting
			}
		}
	}()
	stopKiller := func() {
		select {
		case <-stop:
		default:
			close(stop)
			<-killed
		}
	}
	t.Cleanup(func() {
		stopKiller()
		if env.ControllerPID() == 0 {
			if err := env.StartController(ctx); err != nil {
				t.Errorf("restart the controller: %v", err)
			}
		}
	})

	var times []time.Duration
	var apiRestart time.Duration
	prev := before
	for i := range rollouts {
		image := fmt.Sprintf("example.com/lull/turnrunner:v%d", i+2)
		began := time.Now()
		rollout(t, ns, image)
		if i == rollouts/2 && *chaosRestart {
			// In the middle of this rollout, restart the API server: every
			// watch breaks, every runtime and the controller reconnect.
			time.Sleep(2 * time.Second)
			t0 := time.Now()
			if err := env.Cluster.RestartAPIServer(ctx); err != nil {
				t.Fatalf("restart the API server: %v", err)
			}
			apiRestart = time.Since(t0)
		}
		f, err := scenario.WaitFor(ctx, c, ns, names, 500*time.Millisecond, 5*time.Minute, nil, scenario.MovedFrom(prev))
		if err != nil {
			t.Fatalf("rollout %d (%s): %v", i+1, image, err)
		}
		times = append(times, time.Since(began))
		t.Logf("rollout %d of %d converged in %s", i+1, rollouts, times[i].Round(100*time.Millisecond))
		prev = f
	}
	stopKiller()

	rep, err := auditor.Check(env.Runner.JournalDir(), ns)
	if err != nil {
		t.Fatal(err)
	}
	sorted := append([]time.Duration(nil), times...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	mu.Lock()
	k := kills
	mu.Unlock()
	t.Logf("chaos figures: sessions %d, rollouts %d, controller kills %d, API server restart %s, "+
		"rollout time min %s median %s max %s, pods replaced %d, turns completed %d, interrupted %d, refused %d, lease expiries %d, violations %d",
		n, rollouts, k, apiRestart.Round(100*time.Millisecond),
		sorted[0].Round(100*time.Millisecond), sorted[len(sorted)/2].Round(100*time.Millisecond), sorted[len(sorted)-1].Round(100*time.Millisecond),
		len(rep.Deletions), rep.Completed, len(rep.Interrupted), rep.Refused, rep.ExpiredTurns, len(rep.Violations))
	if len(rep.Interrupted) != 0 {
		t.Errorf("%d turns interrupted", len(rep.Interrupted))
	}
	if k == 0 && rollouts > 1 {
		t.Errorf("the controller was never killed: the run proved nothing about restarts")
	}
	if want := n * rollouts; len(rep.Deletions) < want {
		t.Errorf("%d pods replaced, want at least %d (every session, every rollout)", len(rep.Deletions), want)
	}
	removeSessions(t, ns)
}

// removeSessions deletes the sessions of ns once they have been audited, so
// their runtime processes do not load the machine for the tests that
// follow. The pods the garbage collector deletes with them are exempted
// from the audit: that deletion is the user's, not a rollout's.
func removeSessions(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		auditor.Exempt(p.UID, "its session was deleted at the end of the test")
	}
	if err := c.DeleteAllOf(ctx, &lullv1.Session{}, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
}
