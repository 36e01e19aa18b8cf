package realnode

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/examples/turnrunner"
	"lull.dev/lull/internal/dev/scenario"
)

// realNodeSessions creates a template whose pods run on the real node
// with the injected sidecar (spec.agent: {}) and the reference runtime
// busy with turns, and n sessions of it; it waits until they run. The
// runtime's --model is meant for a real runtime image: the reference
// runtime logs that it ignores it.
func realNodeSessions(t *testing.T, ns string, n int) ([]string, scenario.Fleet) {
	t.Helper()
	tmpl := scenario.Template(ns, "rt", "example.com/lull/turnrunner:v1", "--turn-min=500ms", "--turn-max=3s", "--think-max=500ms", "--model=large")
	tmpl.Spec.Agent = &lullv1.AgentSpec{}
	if err := env.OnRealNode(tmpl); err != nil {
		t.Fatal(err)
	}
	names, err := scenario.Launch(t.Context(), c, tmpl, "s", n)
	if err != nil {
		t.Fatal(err)
	}
	before, err := scenario.WaitFor(t.Context(), c, ns, names, 200*time.Millisecond, 3*time.Minute, nil, scenario.Converged)
	if err != nil {
		t.Fatalf("sessions did not start on the real node: %v", err)
	}
	return names, before
}

func pods(t *testing.T, ns string) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	if err := c.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// A drained rollout of busy sessions whose runtime and sidecar are real
// containers of lull's images: every pod is replaced on the real node,
// the auditor finds no interrupted turn and no violation; before it, only
// the sidecar's container has the session's token (from the OCI spec, and
// from inside the runtime's container through exec, where the API server
// refuses its requests), and the API's pod log endpoint (API server →
// kubelet, with its client certificate) serves both containers' output.
func TestRealNodeRollout(t *testing.T) {
	requireNode(t)
	const ns, n = "real-rollout", 12
	names, before := realNodeSessions(t, ns, n)
	old := map[types.UID]bool{}
	oldUIDs := map[string]string{}
	for name, p := range before.Pods {
		oldUIDs[name] = p.UID
	}
	for _, p := range pods(t, ns) {
		if p.Spec.NodeName != env.Cluster.RealNodeName {
			t.Errorf("pod %s on node %q, want the real node %s", p.Name, p.Spec.NodeName, env.Cluster.RealNodeName)
		}
		old[p.UID] = true
	}

	t.Run("OnlyTheSidecarMountsTheToken", func(t *testing.T) {
		p := pods(t, ns)[0]
		mounts := containerMounts(t, p.UID)
		if got := mounts[lullv1.RuntimeContainerName]; slices.ContainsFunc(got, tokenMount) {
			t.Errorf("the runtime container has a token mount: %q", got)
		}
		if got := mounts[lullv1.AgentContainerName]; !slices.Contains(got, lullv1.AgentTokenDir) {
			t.Errorf("the sidecar's container lacks its token at %s: %q", lullv1.AgentTokenDir, got)
		}
	})

	// What the runtime itself sees, by the path a user has (kubectl exec):
	// `example-runtime selfcheck` finds nothing at the token paths, and
	// the API server, reached at the kubernetes Service from inside the
	// container, refusing a request without credentials.
	t.Run("TheRuntimeSeesNoTokenAndIsRefused", func(t *testing.T) {
		p := pods(t, ns)[0]
		out, errOut, code := execIn(t, ns, p.Name, lullv1.RuntimeContainerName, "example-runtime", turnrunner.SelfCheckCommand)
		t.Logf("kubectl exec %s -c %s -- example-runtime selfcheck:\n%s", p.Name, lullv1.RuntimeContainerName, out)
		if code != 0 {
			t.Errorf("selfcheck exited %d, want 0 (stderr: %s)", code, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != len(turnrunner.TokenPaths)+1 {
			t.Fatalf("selfcheck printed %d lines, want %d (one per token path, one for the API server)", len(lines), len(turnrunner.TokenPaths)+1)
		}
		for i, path := range turnrunner.TokenPaths {
			if !strings.HasPrefix(lines[i], "ok ") || !strings.HasSuffix(lines[i], "nothing at "+path) {
				t.Errorf("line %d: %q, want ok: nothing at %s", i+1, lines[i], path)
			}
		}
		probe := lines[len(lines)-1]
		refused := strings.HasSuffix(probe, "→ 401 Unauthorized") || strings.HasSuffix(probe, "→ 403 Forbidden for system:anonymous")
		if !strings.HasPrefix(probe, "ok ") || !strings.Contains(probe, "/api/v1/namespaces/"+ns+"/pods") || !refused {
			t.Errorf("probe: %q, want ok: GET of the namespace's pods refused with 401, or 403 for system:anonymous", probe)
		}
	})

	// The sidecar's token, from the sidecar's side: its image has no shell
	// and the agent no command that reads a file, so no exec can look at
	// it. What proves it is what only a token allows: the session's report
	// for this very pod, written while the runtime container holds no
	// credential (above), is a write of the sidecar's that the API server
	// admitted.
	t.Run("TheSidecarsReportsAreAdmitted", func(t *testing.T) {
		p := pods(t, ns)[0]
		var s lullv1.Session
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: strings.TrimSuffix(p.Name, "-0")}, &s); err != nil {
			t.Fatal(err)
		}
		if rt := s.Status.Runtime; rt == nil || rt.PodUID != p.UID || rt.State != lullv1.RuntimeServing {
			t.Errorf("session %s: runtime report %+v, want the sidecar's report for pod %s, Serving", s.Name, rt, p.UID)
		}
	})

	t.Run("PodLogsServeRuntimeAndSidecar", func(t *testing.T) {
		cs, err := kubernetes.NewForConfig(env.Cluster.Config)
		if err != nil {
			t.Fatal(err)
		}
		p := pods(t, ns)[0]
		// The runtime's line about the argument it ignores; the sidecar's
		// first lines, whatever they say.
		for container, want := range map[string]string{lullv1.RuntimeContainerName: "--model=large", lullv1.AgentContainerName: ""} {
			b, err := cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: container}).DoRaw(t.Context())
			if err != nil {
				t.Errorf("logs of %s/%s -c %s: %v", ns, p.Name, container, err)
				continue
			}
			if len(strings.TrimSpace(string(b))) == 0 || !strings.Contains(string(b), want) {
				t.Errorf("logs of %s/%s -c %s lack %q:\n%s", ns, p.Name, container, want, b)
			}
		}
	})

	start := time.Now()
	stopWatch := watchReplacements(t.Context(), ns, oldUIDs)
	if err := scenario.SetImage(t.Context(), c, ns, "rt", "example.com/lull/turnrunner:v2"); err != nil {
		t.Fatal(err)
	}
	if _, err := scenario.WaitFor(t.Context(), c, ns, names, 200*time.Millisecond, 4*time.Minute, nil, scenario.MovedFrom(before)); err != nil {
		t.Fatalf("rollout did not converge: %v", err)
	}
	t.Logf("rollout of %d sessions on the real node: %s", n, time.Since(start).Round(100*time.Millisecond))
	waitFor(t, time.Minute, "every new runtime reporting Serving", func() bool {
		var list lullv1.SessionList
		if err := c.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
			return false
		}
		return !slices.ContainsFunc(list.Items, func(s lullv1.Session) bool {
			rt := s.Status.Runtime
			return rt == nil || string(rt.PodUID) == oldUIDs[s.Name] || rt.State != lullv1.RuntimeServing
		})
	})
	time.Sleep(300 * time.Millisecond) // the watch's last poll
	logReplacements(t, stopWatch())
	for _, p := range pods(t, ns) {
		if old[p.UID] {
			t.Errorf("pod %s (%s) was not replaced", p.Name, p.UID)
		}
		if p.Spec.NodeName != env.Cluster.RealNodeName {
			t.Errorf("new pod %s on node %q, want the real node", p.Name, p.Spec.NodeName)
		}
	}
	time.Sleep(time.Second) // the new runtimes' first turns reach the journals
	rep, err := auditor.Check(env.Runner.JournalDir(), ns)
	if err != nil {
		t.Fatalf("audit: %v", err)
	}
	for _, v := range rep.Violations {
		t.Errorf("audit violation: %s", v)
	}
	if len(rep.Interrupted) > 0 {
		t.Errorf("%d turns interrupted", len(rep.Interrupted))
	}
	if len(rep.Deletions) < n {
		t.Errorf("auditor saw %d deletions, want %d", len(rep.Deletions), n)
	}
	if rep.Completed == 0 {
		t.Error("the journals hold no completed turn: the real containers' journals did not reach the auditor")
	}
	t.Logf("audit: %d deletions, %d turns completed, %d interrupted, %d refused", len(rep.Deletions), rep.Completed, len(rep.Interrupted), rep.Refused)
}

// tokenMount reports whether a container mount point is where client-go
// (or any Kubernetes client) looks for a ServiceAccount token.
func tokenMount(dest string) bool {
	return strings.HasPrefix(dest, "/var/run/secrets/kubernetes.io") || strings.HasPrefix(dest, "/run/secrets/kubernetes.io")
}

// containerMounts returns, for each container of the pod with this UID,
// the mount points runc was given (from containerd's OCI spec): what the
// container's file system really holds, not what the pod spec asks.
func containerMounts(t *testing.T, uid types.UID) map[string][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := env.Cluster.Ctr(ctx, "containers", "list", "--quiet", "labels.\"io.kubernetes.pod.uid\"=="+string(uid))
	if err != nil {
		t.Fatal(err)
	}
	mounts := map[string][]string{}
	for _, id := range strings.Fields(out) {
		info, err := env.Cluster.Ctr(ctx, "containers", "info", id)
		if err != nil {
			t.Fatal(err)
		}
		var ci struct {
			Labels map[string]string `json:"Labels"`
			Spec   struct {
				Mounts []struct {
					Destination string `json:"destination"`
				} `json:"mounts"`
			} `json:"Spec"`
		}
		if err := json.Unmarshal([]byte(info), &ci); err != nil {
			t.Fatalf("ctr containers info %s: %v", id, err)
		}
		name := ci.Labels["io.kubernetes.container.name"]
		if name == "" {
			continue // the sandbox
		}
		for _, m := range ci.Spec.Mounts {
			mounts[name] = append(mounts[name], m.Destination)
		}
	}
	if len(mounts) == 0 {
		t.Fatalf("no container of pod %s in the real node's containerd", uid)
	}
	return mounts
}

// The same rollout on the simulated node (KWOK, the runtime and the
// sidecar as host processes of the pod runner) in the same environment:
// the figures the real node's are compared with (docs/benchmarks.md), and
// the same verdict of the auditor.
func TestKWOKRolloutBesideTheRealNodeInterruptsNoTurn(t *testing.T) {
	requireNode(t) // the tier's environment
	const ns, n = "kwok-rollout", 12
	tmpl := scenario.Template(ns, "rt", "example.com/lull/turnrunner:v1", "--turn-min=500ms", "--turn-max=3s", "--think-max=500ms")
	tmpl.Spec.Agent = &lullv1.AgentSpec{}
	names, err := scenario.Launch(t.Context(), c, tmpl, "s", n)
	if err != nil {
		t.Fatal(err)
	}
	before, err := scenario.WaitFor(t.Context(), c, ns, names, 200*time.Millisecond, 3*time.Minute, nil, scenario.Converged)
	if err != nil {
		t.Fatalf("sessions did not start: %v", err)
	}
	oldUIDs := map[string]string{}
	for name, p := range before.Pods {
		oldUIDs[name] = p.UID
	}
	stopWatch := watchReplacements(t.Context(), ns, oldUIDs)
	if err := scenario.SetImage(t.Context(), c, ns, "rt", "example.com/lull/turnrunner:v2"); err != nil {
		t.Fatal(err)
	}
	if _, err := scenario.WaitFor(t.Context(), c, ns, names, 200*time.Millisecond, 4*time.Minute, nil, scenario.MovedFrom(before)); err != nil {
		t.Fatalf("rollout did not converge: %v", err)
	}
	waitFor(t, time.Minute, "every new runtime reporting Serving", func() bool {
		var list lullv1.SessionList
		if err := c.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
			return false
		}
		return !slices.ContainsFunc(list.Items, func(s lullv1.Session) bool {
			rt := s.Status.Runtime
			return rt == nil || string(rt.PodUID) == oldUIDs[s.Name] || rt.State != lullv1.RuntimeServing
		})
	})
	time.Sleep(300 * time.Millisecond)
	logReplacements(t, stopWatch())
	rep, err := auditor.Check(env.Runner.JournalDir(), ns)
	if err != nil {
		t.Fatalf("audit: %v", err)
	}
	for _, v := range rep.Violations {
		t.Errorf("audit violation: %s", v)
	}
	if len(rep.Interrupted) > 0 {
		t.Errorf("%d turns interrupted", len(rep.Interrupted))
	}
}
