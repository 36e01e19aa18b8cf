package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/journal"
	"lull.dev/lull/internal/dev/scenario"
)

// withWorkspace gives the template a per-session claim "workspace" of the
// default StorageClass (lull-dev here), mounted at /workspace in the
// runtime container.
func withWorkspace(t *lullv1.SessionTemplate) {
	t.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{
		ObjectMeta: metav1.ObjectMeta{Name: "workspace"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}}
	rt := t.RuntimeContainer()
	rt.VolumeMounts = append(rt.VolumeMounts, corev1.VolumeMount{Name: "workspace", MountPath: "/workspace"})
}

// workspaceSeen returns, for the turns begun on pod, the pods whose turns
// had written to the workspace before (journal.Entry.WorkspacePods).
func workspaceSeen(t *testing.T, pod types.UID) map[string]bool {
	t.Helper()
	entries, err := journal.ReadDir(env.Runner.JournalDir())
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range entries {
		if e.PodUID == pod && e.Event == journal.Begin {
			for _, p := range e.WorkspacePods {
				seen[p] = true
			}
		}
	}
	return seen
}

func claim(t *testing.T, ns, name string) *corev1.PersistentVolumeClaim {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{}
	err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, pvc)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return pvc
}

// replacedAll waits until every session runs the update revision on a pod
// other than the one it had before.
func replacedAll(t *testing.T, ns string, names []string, before scenario.Fleet) scenario.Fleet {
	t.Helper()
	after, err := scenario.WaitFor(context.Background(), c, ns, names, 200*time.Millisecond, 2*time.Minute, nil, func(f scenario.Fleet) bool {
		if !f.Converged() {
			return false
		}
		for _, name := range names {
			if f.Pods[name].UID == before.Pods[name].UID {
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("rollout did not converge: %v", err)
	}
	return after
}

// finishedTurn waits until a turn has ended on pod.
func finishedTurn(t *testing.T, pod types.UID, what string) {
	t.Helper()
	eventually(t, 20*time.Second, what, func() error {
		for _, tr := range turnsOn(t, pod) {
			if !tr.Ended.IsZero() {
				return nil
			}
		}
		return fmt.Errorf("no finished turn on %s", pod)
	})
}

// A session's workspace claim outlives its pod: a turn on the first pod
// writes a file there, a drained rollout replaces the pod, and a turn on
// the new pod reads what the first pod wrote. Suspending keeps the claim
// (whenScaled: Retain, the default); deleting the Session deletes it
// (whenDeleted: Delete).
func TestWorkspaceSurvivesRollout(t *testing.T) {
	ns, names, before := setupTemplate(t, 2, withWorkspace, "--workspace=/workspace", "--turn-min=200ms", "--turn-max=600ms", "--think-max=200ms")
	claims := map[string]types.UID{}
	for _, name := range names {
		pvc := claim(t, ns, "workspace-"+name+"-0")
		if pvc == nil || pvc.Status.Phase != corev1.ClaimBound {
			t.Fatalf("session %s: claim workspace-%s-0 = %+v, want Bound", name, name, pvc)
		}
		claims[name] = pvc.UID
		finishedTurn(t, types.UID(before.Pods[name].UID), name+": a turn ended on the first pod")
	}

	rollout(t, ns, "example.com/lull/turnrunner:v2")
	after := replacedAll(t, ns, names, before)
	for _, name := range names {
		old, cur := before.Pods[name].UID, types.UID(after.Pods[name].UID)
		eventually(t, 20*time.Second, name+": a turn on the new pod reads the old pod's file", func() error {
			if seen := workspaceSeen(t, cur); !seen[old] {
				return fmt.Errorf("turns on %s saw workspace writers %v, want %s among them", cur, slices.Sorted(maps.Keys(seen)), old)
			}
			return nil
		})
		if pvc := claim(t, ns, "workspace-"+name+"-0"); pvc == nil || pvc.UID != claims[name] {
			t.Errorf("session %s: its claim was replaced across the rollout", name)
		}
	}

	// Suspended: pod gone, claim kept.
	s1 := names[1]
	setSuspend(t, ns, s1, true)
	eventually(t, time.Minute, s1+" suspended, pod gone", func() error {
		if p := pod(t, ns, s1); p != nil {
			return fmt.Errorf("pod %s still there", p.UID)
		}
		return nil
	})
	if pvc := claim(t, ns, "workspace-"+s1+"-0"); pvc == nil || pvc.UID != claims[s1] {
		t.Fatalf("suspending %s removed its workspace claim", s1)
	}

	// Deleted: the claim goes with the Session.
	if err := c.Delete(context.Background(), &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s1}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, s1+"'s claim deleted with the Session", func() error {
		if pvc := claim(t, ns, "workspace-"+s1+"-0"); pvc != nil && pvc.DeletionTimestamp == nil {
			return fmt.Errorf("claim still there")
		}
		return nil
	})
}

// With spec.agent, the runtime speaks only HTTP to the agent sidecar's
// socket and holds no token; the sidecar reports for it, and a rollout is
// drained through it without interrupting a turn (the auditor checks).
func TestAgentSidecarRollout(t *testing.T) {
	ns, names, before := setupTemplate(t, 3, func(t *lullv1.SessionTemplate) { t.Spec.Agent = &lullv1.AgentSpec{} },
		"--turn-min=300ms", "--turn-max=2s", "--think-max=300ms")
	for _, name := range names {
		p := pod(t, ns, name)
		if ptr.Deref(p.Spec.AutomountServiceAccountToken, true) {
			t.Errorf("%s: pod mounts the ServiceAccount token in every container", p.Name)
		}
		if len(p.Spec.InitContainers) == 0 || p.Spec.InitContainers[0].Name != lullv1.AgentContainerName {
			t.Fatalf("%s: no agent sidecar", p.Name)
		}
		uid := p.UID
		eventually(t, 20*time.Second, name+": turns through the agent and its reports", func() error {
			if len(turnsOn(t, uid)) == 0 {
				return fmt.Errorf("no turns on %s yet", uid)
			}
			if r := session(t, ns, name).Status.Runtime; r == nil || r.PodUID != uid || r.State != lullv1.RuntimeServing {
				return fmt.Errorf("runtime report %+v", r)
			}
			return nil
		})
	}
	rollout(t, ns, "example.com/lull/turnrunner:v2")
	after := replacedAll(t, ns, names, before)
	for _, name := range names {
		finishedTurn(t, types.UID(after.Pods[name].UID), name+": a turn finished through the new pod's agent")
	}
}

// Rendering is stable: a restarted controller re-renders every session's
// StatefulSet byte for byte, so it writes nothing and no StatefulSet gets a
// new ControllerRevision (each would replace a pod).
func TestRestartedControllerCreatesNoRevision(t *testing.T) {
	ns, names, _ := setupTemplate(t, 2, func(t *lullv1.SessionTemplate) {
		withWorkspace(t)
		t.Spec.Agent = &lullv1.AgentSpec{}
		t.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "sessions", Operator: corev1.TolerationOpExists}}
	})
	revisions := func() (map[string]int64, int) {
		gens := map[string]int64{}
		for _, name := range names {
			var sts appsv1.StatefulSet
			if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &sts); err != nil {
				t.Fatal(err)
			}
			gens[name] = sts.Generation
		}
		var crs appsv1.ControllerRevisionList
		if err := c.List(context.Background(), &crs, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		return gens, len(crs.Items)
	}
	gens, count := revisions()
	if count != len(names) {
		t.Fatalf("%d ControllerRevisions for %d sessions before the restart", count, len(names))
	}
	env.KillController()
	if err := env.StartController(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Every session is reconciled by the new controller's first list; a
	// write would show within seconds.
	never(t, 5*time.Second, "no StatefulSet rewritten after a controller restart", func() error {
		if gens2, count2 := revisions(); count2 != count || !maps.Equal(gens, gens2) {
			return fmt.Errorf("%d ControllerRevisions (was %d), StatefulSet generations %v (were %v)", count2, count, gens2, gens)
		}
		return nil
	})
}

// A claim that cannot be bound (an unknown StorageClass) is named on the
// Session, with the warning the volume controller gave it.
func TestUnknownStorageClassIsNamedOnTheSession(t *testing.T) {
	ctx := context.Background()
	ns := "e2e-unknown-class"
	tmpl := scenario.Template(ns, "rt", "example.com/lull/turnrunner:v1")
	withWorkspace(tmpl)
	tmpl.Spec.VolumeClaimTemplates[0].Spec.StorageClassName = ptr.To("nope")
	names, err := scenario.Launch(ctx, c, tmpl, "s", 1)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "ClaimPending naming the claim and the class", func() error {
		r := meta.FindStatusCondition(session(t, ns, names[0]).Status.Conditions, lullv1.ConditionReady)
		if r == nil || r.Reason != "ClaimPending" || !strings.Contains(r.Message, "workspace-s-0-0") || !strings.Contains(r.Message, `"nope"`) {
			return fmt.Errorf("Ready = %+v", r)
		}
		return nil
	})
}
