package fleet

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/audit"
	"lull.dev/lull/internal/dev/scenario"
	"lull.dev/lull/internal/dev/testenv"
)

// Sessions whose runtimes run in fleet mode, busy with turns, are rolled
// out once under Drain: every pod is replaced after its own runtime's
// Drained report, no turn is interrupted, and the new pods' runtimes
// report Serving under their own pod UIDs — the protocol a runtime in its
// own pod speaks.
func TestFleetRollout(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	auditor, err := audit.Start(ctx, env.Cluster.EtcdURL)
	if err != nil {
		t.Fatal(err)
	}
	const ns, n = "fleet-rollout", 6
	tmpl := scenario.Template(ns, "rt", "example.com/lull/turnrunner:v1", "--turn-min=200ms", "--turn-max=1s", "--think-max=300ms")
	names, err := scenario.Launch(ctx, c, tmpl, "s", n)
	if err != nil {
		t.Fatal(err)
	}
	before, err := scenario.WaitFor(ctx, c, ns, names, 200*time.Millisecond, time.Minute, nil, scenario.Converged)
	if err != nil {
		t.Fatalf("sessions did not start: %v", err)
	}
	eventually(t, 20*time.Second, "every runtime has finished a turn", func() error {
		rep, err := auditor.Check(env.Runner.JournalDir(), ns)
		if err != nil {
			return err
		}
		if rep.Completed < n {
			return fmt.Errorf("%d turns completed", rep.Completed)
		}
		return nil
	})

	if err := scenario.SetImage(ctx, c, ns, "rt", "example.com/lull/turnrunner:v2"); err != nil {
		t.Fatal(err)
	}
	after, err := scenario.WaitFor(ctx, c, ns, names, 200*time.Millisecond, time.Minute, nil, scenario.MovedFrom(before))
	if err != nil {
		t.Fatalf("rollout: %v", err)
	}
	eventually(t, 20*time.Second, "each new pod's runtime reports Serving under its own pod UID", func() error {
		var sessions lullv1.SessionList
		if err := c.List(ctx, &sessions, &client.ListOptions{Namespace: ns}); err != nil {
			return err
		}
		for _, s := range sessions.Items {
			want := after.Pods[s.Name].UID
			if r := s.Status.Runtime; r == nil || string(r.PodUID) != want || r.State != lullv1.RuntimeServing {
				return fmt.Errorf("session %s (pod %s): runtime report %+v", s.Name, want, r)
			}
		}
		return nil
	})

	rep, err := auditor.Check(env.Runner.JournalDir(), ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range rep.Violations {
		t.Errorf("audit violation: %s", v)
	}
	if len(rep.Deletions) != n || len(rep.Interrupted) != 0 {
		t.Errorf("%d deletions, %d interrupted turns; want %d, 0", len(rep.Deletions), len(rep.Interrupted), n)
	}
	t.Logf("audit: %d deletions, %d turns completed, %d interrupted, %d refused", len(rep.Deletions), rep.Completed, len(rep.Interrupted), rep.Refused)

	// Every runtime, old pods' and new, ran in this process.
	log, err := os.ReadFile(env.Cluster.LogPath("pod-runner"))
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range after.Pods {
		for _, uid := range []string{before.Pods[name].UID, p.UID} {
			if !strings.Contains(string(log), "("+uid+"): container runtime started in this process (fleet)") {
				t.Errorf("pod %s of session %s: no fleet runtime started in the pod runner's log", uid, name)
			}
		}
	}
}

// eventually is testenv.Eventually.
var eventually = testenv.Eventually
