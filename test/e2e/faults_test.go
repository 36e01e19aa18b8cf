package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/localenv"
	"lull.dev/lull/internal/scenario"
)

// A template flipped back and forth between two revisions over busy
// sessions: every flip withdraws outstanding requests and issues new ones for
// a revision an earlier request already named. No Drained report of an
// earlier request may answer a later one, so no turn is interrupted, and the
// auditor sees no request ID issued twice.
func TestTemplateFlipsOverBusySessions(t *testing.T) {
	ns, names, before := setup(t, 6, "--turn-min=500ms", "--turn-max=2s", "--think-max=300ms")
	for i := range 12 {
		rollout(t, ns, []string{"example.com/lull/turnrunner:v2", "example.com/lull/turnrunner:v1"}[i%2])
		time.Sleep(1200 * time.Millisecond)
	}
	rollout(t, ns, "example.com/lull/turnrunner:v2")
	if _, err := scenario.WaitFor(context.Background(), c, ns, names, 200*time.Millisecond, 2*time.Minute, nil, scenario.MovedFrom(before)); err != nil {
		t.Fatal(err)
	}
	rep, err := auditor.Check(env.Runner.JournalDir(), ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Interrupted) != 0 || rep.Completed == 0 {
		t.Errorf("turns: %d completed, %d interrupted; want some completed and none interrupted", rep.Completed, len(rep.Interrupted))
	}
}

// leaderArgs shorten leader election so a failover takes seconds, not the
// production 15 s.
var leaderArgs = []string{"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms"}

// Two replicas with leader election, as the shipped Deployment runs them.
// Mid-drain the leader is killed; then the next leader is frozen (SIGSTOP)
// past its lease, the standby takes over and acts, and the frozen one is
// resumed. Whatever the resumed one still writes must be harmless: no turn
// interrupted, no delete without a matching report, one drain request per
// pod and revision however often leadership moves, and each StatefulSet's
// template changed once (no flip-flop between replicas).
func TestLeaderFailover(t *testing.T) {
	ctx := context.Background()
	env.KillController()
	t.Cleanup(func() {
		if err := env.StartController(ctx); err != nil {
			t.Errorf("restart the default controller: %v", err)
		}
	})
	var replicas []*localenv.Controller
	start := func(name string) {
		t.Helper()
		r, err := env.StartReplica(ctx, name, leaderArgs...)
		if err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, r)
		t.Cleanup(r.Kill)
	}
	start("controller-a")
	start("controller-b")
	leader := waitLeader(t, replicas, nil)

	ns, names, before := setup(t, 4, "--turn-min=6s", "--turn-max=6s", "--think-max=0s")
	generations := statefulSetGenerations(t, ns, names)
	requests := watchRequests(t, ns, names)
	for _, name := range names {
		p := pod(t, ns, name)
		eventually(t, 15*time.Second, "a turn is open on "+name, func() error { return openTurn(t, p.UID) })
	}
	rollout(t, ns, "example.com/lull/turnrunner:v2")
	eventually(t, 15*time.Second, "drain requested", func() error {
		if d := session(t, ns, names[0]).Status.Drain; d == nil {
			return fmt.Errorf("no drain request on %s", names[0])
		}
		return nil
	})

	// Crash the leader mid-drain; a third replica joins.
	leader.Kill()
	start("controller-c")
	leader = waitLeader(t, replicas, leader)

	// Freeze the new leader past its lease: a standby takes over and acts
	// while the frozen one still believes it leads.
	if err := leader.Pause(); err != nil {
		t.Fatal(err)
	}
	frozen := leader
	leader = waitLeader(t, replicas, frozen)
	time.Sleep(2 * time.Second) // the new leader acts on the drains
	if err := frozen.Resume(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the resumed replica gives up leadership", func() error {
		if frozen.Exited() {
			return nil
		}
		if lead, err := frozen.Leader(); err == nil && !lead {
			return nil
		}
		return fmt.Errorf("%s still leads", frozen.Name)
	})

	if _, err := scenario.WaitFor(ctx, c, ns, names, 200*time.Millisecond, 2*time.Minute, nil, scenario.MovedFrom(before)); err != nil {
		t.Fatal(err)
	}
	for name, g := range statefulSetGenerations(t, ns, names) {
		if g != generations[name]+1 {
			t.Errorf("StatefulSet %s went from generation %d to %d: its template changed more than once in one rollout", name, generations[name], g)
		}
	}
	for pod, ids := range requests.byPodRevision() {
		if len(ids) != 1 {
			t.Errorf("pod and revision %s got %d drain requests %v, want 1 across every leader change", pod, len(ids), ids)
		}
	}
}

// waitLeader waits until exactly one live replica other than not holds the
// lease, and returns it.
func waitLeader(t *testing.T, replicas []*localenv.Controller, not *localenv.Controller) *localenv.Controller {
	t.Helper()
	var leader *localenv.Controller
	eventually(t, 30*time.Second, "a replica leads", func() error {
		leader = nil
		for _, r := range replicas {
			if r == not || r.Exited() {
				continue
			}
			lead, err := r.Leader()
			if err != nil {
				return err
			}
			if lead {
				if leader != nil {
					return fmt.Errorf("%s and %s both lead", leader.Name, r.Name)
				}
				leader = r
			}
		}
		if leader == nil {
			return fmt.Errorf("no replica leads yet")
		}
		return nil
	})
	t.Logf("leader: %s", leader.Name)
	return leader
}

func statefulSetGenerations(t *testing.T, ns string, names []string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, name := range names {
		sts := &appsv1.StatefulSet{}
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, sts); err != nil {
			t.Fatal(err)
		}
		out[name] = sts.Generation
	}
	return out
}

// requestLog records every drain request seen on a set of sessions.
type requestLog struct {
	mu   sync.Mutex
	seen map[string]map[string]bool // "<pod UID>/<revision>" → request IDs
}

func (l *requestLog) byPodRevision() map[string]map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen
}

// watchRequests polls the sessions every 50 ms until the test ends and
// records their Update drain requests.
func watchRequests(t *testing.T, ns string, names []string) *requestLog {
	l := &requestLog{seen: map[string]map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			var list lullv1.SessionList
			if err := c.List(ctx, &list, client.InNamespace(ns)); err == nil {
				l.mu.Lock()
				for _, s := range list.Items {
					if d := s.Status.Drain; d != nil && d.Reason == lullv1.DrainReasonUpdate {
						k := string(d.PodUID) + "/" + d.Revision
						if l.seen[k] == nil {
							l.seen[k] = map[string]bool{}
						}
						l.seen[k][d.RequestID] = true
					}
				}
				l.mu.Unlock()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return l
}
