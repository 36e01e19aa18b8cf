package realnode

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"lull.dev/lull/internal/dev/chart"
	"lull.dev/lull/internal/dev/install"
	"lull.dev/lull/internal/dev/localenv"
	"lull.dev/lull/internal/dev/scenario"
)

// The namespace and release of the chart's controller on the real node;
// the release name keeps its cluster-wide objects apart from the ones
// the environment installed for its own controller.
const chartNamespace, chartRelease = "lull-chart", "lull-rn"

// The Helm chart's controller, two replicas of the real controller image
// (the chart's default, localenv.ControllerImage, imported) as pods on the
// real node under the chart's securityContext, leads and
// carries a rollout; with the leader's pod deleted mid-rollout, the other
// replica takes the Lease over and finishes it, with no turn interrupted.
func TestChartControllerOnTheRealNodeSurvivesItsLeader(t *testing.T) {
	requireNode(t)
	ctx := t.Context()
	const ns = "real-chart-sessions"

	// The environment's own controller would race the chart's for the
	// same sessions: it is stopped for the test and started again after.
	env.KillController()
	t.Cleanup(func() {
		_ = c.DeleteAllOf(context.Background(), &appsv1.Deployment{}, client.InNamespace(chartNamespace))
		if err := env.StartController(context.Background()); err != nil {
			t.Errorf("restart the environment's controller: %v", err)
		}
	})

	if err := scenario.EnsureNamespace(ctx, c, chartNamespace); err != nil {
		t.Fatal(err)
	}
	objs, err := chart.Render(chart.Options{Release: chartRelease, Namespace: chartNamespace, KubeVersion: "v1.37.2",
		Values: map[string]any{
			"watchNamespace": ns,
			"nodeSelector":   map[string]any{corev1.LabelHostname: env.Cluster.RealNodeName},
			"tolerations":    []any{map[string]any{"key": localenv.RealNodeToleration().Key, "operator": "Exists", "effect": "NoSchedule"}},
			"leaderElection": map[string]any{"leaseDuration": "6s", "renewDeadline": "4s", "retryPeriod": "1s"},
		}})
	if err != nil {
		t.Fatalf("render the chart: %v", err)
	}
	if err := install.ApplyObjects(ctx, env.Cluster.Config, "realnode-chart", objs); err != nil {
		t.Fatalf("apply the chart: %v", err)
	}
	var deploy appsv1.Deployment
	waitFor(t, 3*time.Minute, "the chart's two controller pods ready on the real node", func() bool {
		var list appsv1.DeploymentList
		if err := c.List(ctx, &list, client.InNamespace(chartNamespace)); err != nil || len(list.Items) != 1 {
			return false
		}
		deploy = list.Items[0]
		return deploy.Status.ReadyReplicas == 2
	})

	names, before := kwokSessions(t, ns, 4)
	leader := leaseHolder(t)
	t.Logf("leader before the rollout: %s", leader)
	if err := scenario.SetImage(ctx, c, ns, "rt", "example.com/lull/turnrunner:v2"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "the rollout under way", func() bool {
		f, err := scenario.Observe(ctx, c, ns, names)
		return err == nil && (f.Draining > 0 || scenario.MovedFrom(before)(f))
	})
	var leaderPod corev1.Pod
	if err := c.Get(ctx, types.NamespacedName{Namespace: chartNamespace, Name: leader}, &leaderPod); err != nil {
		t.Fatalf("the leader's pod %s: %v", leader, err)
	}
	if leaderPod.Spec.NodeName != env.Cluster.RealNodeName {
		t.Errorf("the leader's pod runs on %q, want the real node", leaderPod.Spec.NodeName)
	}
	if err := c.Delete(ctx, &leaderPod); err != nil {
		t.Fatal(err)
	}
	if _, err := scenario.WaitFor(ctx, c, ns, names, 200*time.Millisecond, 3*time.Minute, nil, scenario.MovedFrom(before)); err != nil {
		t.Fatalf("the rollout did not finish after the leader's pod was deleted: %v", err)
	}
	if next := leaseHolder(t); next == leader {
		t.Errorf("the Lease is still held by %s, whose pod was deleted", leader)
	} else {
		t.Logf("leader after: %s", next)
	}
	rep, err := auditor.Check(env.Runner.JournalDir(), ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range rep.Violations {
		t.Errorf("audit violation: %s", v)
	}
	if len(rep.Interrupted) > 0 {
		t.Errorf("%d turns interrupted", len(rep.Interrupted))
	}
}

// kwokSessions creates n busy sessions of a template on the simulated
// node (host processes: the test is about the controller) and waits until
// they run.
func kwokSessions(t *testing.T, ns string, n int) ([]string, scenario.Fleet) {
	t.Helper()
	names, err := scenario.Launch(t.Context(), c, scenario.Template(ns, "rt", "example.com/lull/turnrunner:v1", "--turn-min=500ms", "--turn-max=2s"), "s", n)
	if err != nil {
		t.Fatal(err)
	}
	before, err := scenario.WaitFor(t.Context(), c, ns, names, 200*time.Millisecond, 2*time.Minute, nil, scenario.Converged)
	if err != nil {
		t.Fatalf("sessions did not start under the chart's controller: %v", err)
	}
	return names, before
}

// leaseHolder is the pod holding the controller's Lease: controller-runtime
// names a holder <hostname>_<uuid>, and a pod's hostname is its name.
func leaseHolder(t *testing.T) string {
	t.Helper()
	var lease coordinationv1.Lease
	if err := c.Get(t.Context(), types.NamespacedName{Namespace: chartNamespace, Name: "lull-controller.lull.dev"}, &lease); err != nil {
		t.Fatalf("the chart controller's Lease: %v", err)
	}
	if lease.Spec.HolderIdentity == nil {
		t.Fatal("the chart controller's Lease has no holder")
	}
	pod, _, _ := strings.Cut(*lease.Spec.HolderIdentity, "_")
	return pod
}

// waitFor polls cond every 200 ms until it holds, failing the test after
// timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
