package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
	"lull.dev/lull/internal/dev/localenv"
	"lull.dev/lull/internal/dev/scenario"
)

// A template flipped back and forth between two revisions over busy
// sessions: every flip withdraws outstanding requests and issues new ones for
// a revision an earlier request already named. No Drained report of an
// earlier request may answer a later one, so no turn is interrupted, and the
// auditor sees no request ID issued twice. Meanwhile a second writer
// annotates every session every 200 ms, so the controller's status writes
// keep meeting conflicts; none of its bookkeeping may be lost to them.
func TestTemplateFlipsOverBusySessions(t *testing.T) {
	ns, names, before := setup(t, 6, "--turn-min=500ms", "--turn-max=2s", "--think-max=300ms")
	stop := secondWriter(t, ns, names)
	defer stop()
	for i := range 12 {
		rollout(t, ns, []string{"example.com/lull/turnrunner:v2", "example.com/lull/turnrunner:v1"}[i%2])
		time.Sleep(1200 * time.Millisecond)
	}
	rollout(t, ns, "example.com/lull/turnrunner:v2")
	if _, err := scenario.WaitFor(context.Background(), c, ns, names, 200*time.Millisecond, 2*time.Minute, nil, scenario.MovedFrom(before)); err != nil {
		t.Fatal(err)
	}
	stop()
	rep, err := auditor.Check(env.Runner.JournalDir(), ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Interrupted) != 0 || rep.Completed == 0 {
		t.Errorf("turns: %d completed, %d interrupted; want some completed and none interrupted", rep.Completed, len(rep.Interrupted))
	}
}

// secondWriter annotates every session every 200 ms until stop is called,
// as another controller or a user's tooling might: every write changes the
// session's resourceVersion, so the controller's status patches, made with
// the version it observed, meet conflicts and must be retried whole.
func secondWriter(t *testing.T, ns string, names []string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			for _, name := range names {
				patch := fmt.Sprintf(`{"metadata":{"annotations":{"example.com/touched":"%d"}}}`, i)
				_ = c.Patch(ctx, &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, client.RawPatch(types.MergePatchType, []byte(patch)))
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }
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

// An admin (or anything with write access to sessions/status) floods the
// sessions of a rollout with late, foreign, forged and malformed runtime
// reports. None may cause a delete the protocol does not allow; once the
// flood stops, the runtimes write their real reports again and the rollout
// finishes.
func TestReportStorm(t *testing.T) {
	const total = 10000
	ns, names, before := setup(t, 10, "--turn-min=1s", "--turn-max=4s", "--think-max=500ms")
	ctx := context.Background()
	rollout(t, ns, "example.com/lull/turnrunner:v2")

	var (
		mu       sync.Mutex
		sessions = map[string]lullv1.Session{}
	)
	refresh := func() {
		var list lullv1.SessionList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err == nil {
			mu.Lock()
			for _, s := range list.Items {
				sessions[s.Name] = s
			}
			mu.Unlock()
		}
	}
	refresh()
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
				refresh()
			}
		}
	}()

	var accepted, refused atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := w; i < total; i += 8 {
				name := names[rng.IntN(len(names))]
				mu.Lock()
				s := sessions[name]
				mu.Unlock()
				body := stormReport(rng, i%4, &s)
				err := c.Status().Patch(ctx, &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, client.RawPatch(types.MergePatchType, body))
				if err != nil {
					refused.Add(1)
				} else {
					accepted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	t.Logf("storm: %d reports written, %d refused by the API server", accepted.Load(), refused.Load())
	if accepted.Load() < total/2 {
		t.Fatalf("only %d of %d storm reports were written: the storm did not happen", accepted.Load(), total)
	}
	if _, err := scenario.WaitFor(ctx, c, ns, names, 200*time.Millisecond, 3*time.Minute, nil, scenario.MovedFrom(before)); err != nil {
		t.Fatal(err)
	}
	rep, err := auditor.Check(env.Runner.JournalDir(), ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Interrupted) != 0 {
		t.Errorf("%d turns interrupted", len(rep.Interrupted))
	}
}

// stormReport returns a status patch that no protocol rule lets answer the
// session's drain request: kind 0 late (an earlier request of this pod),
// 1 foreign (the request, another pod), 2 forged (this pod, a request never
// issued), 3 malformed (Drained with turns, no pod UID, or an unknown state,
// which the API server refuses).
func stormReport(rng *rand.Rand, kind int, s *lullv1.Session) []byte {
	pod := s.Status.PodUID
	seq := s.Status.DrainSequence
	current := ""
	if s.Status.Drain != nil {
		current = s.Status.Drain.RequestID
	}
	var r map[string]any
	if kind == 0 && seq < 2 {
		kind = 2 // no earlier request to be late for
	}
	switch kind {
	case 0:
		// An ID of a request issued before the current one (sequence
		// 1 … seq-1). Never one at or after the observed sequence: the
		// snapshot may lag, and a report for a request about to be issued
		// is not late but a forgery of its answer, which only someone who
		// can write any status (an admin) can make.
		r = map[string]any{"podUID": pod, "requestID": drain.RequestID(pod, lullv1.DrainReasonUpdate, 1+rng.Int64N(seq-1)), "state": "Drained", "activeTurns": 0}
	case 1:
		r = map[string]any{"podUID": fmt.Sprintf("foreign-%d", rng.IntN(1000)), "requestID": current, "state": "Drained", "activeTurns": 0}
	case 2:
		r = map[string]any{"podUID": pod, "requestID": drain.RequestID(pod, lullv1.DrainReasonUpdate, 1_000_000+rng.Int64N(1_000_000)), "state": "Drained", "activeTurns": 0}
	default:
		switch rng.IntN(3) {
		case 0:
			r = map[string]any{"podUID": pod, "requestID": current, "state": "Drained", "activeTurns": 1 + rng.IntN(5)}
		case 1:
			r = map[string]any{"podUID": "", "requestID": current, "state": "Drained", "activeTurns": 0}
		default:
			r = map[string]any{"podUID": pod, "requestID": current, "state": "Finished", "activeTurns": 0}
		}
	}
	b, err := json.Marshal(map[string]any{"status": map[string]any{"runtime": r}})
	if err != nil {
		panic(err)
	}
	return b
}
