package realnode

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/journal"
	"lull.dev/lull/internal/dev/scenario"
)

// A session's workspace claim is a real mount on the real node: what the
// old pod's turns wrote there, the new pod's turns read after the
// replacement. The runtime here holds the session's token itself (no
// sidecar), so its own watch and reports reach the API server through the
// kubernetes Service's IP.
func TestRealNodeWorkspaceSurvivesReplacement(t *testing.T) {
	requireNode(t)
	const ns, n = "real-workspace", 2
	tmpl := scenario.Template(ns, "rt", "example.com/lull/turnrunner:v1", "--turn-min=200ms", "--turn-max=800ms", "--think-max=200ms", "--workspace=/workspace")
	rt := tmpl.RuntimeContainer()
	rt.VolumeMounts = append(rt.VolumeMounts, corev1.VolumeMount{Name: "workspace", MountPath: "/workspace"})
	// The dev provisioner's directories are root's 0755.
	tmpl.Spec.Template.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](0)}
	tmpl.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{
		ObjectMeta: metav1.ObjectMeta{Name: "workspace"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}},
		},
	}}
	if err := env.OnRealNode(tmpl); err != nil {
		t.Fatal(err)
	}
	names, err := scenario.Launch(t.Context(), c, tmpl, "s", n)
	if err != nil {
		t.Fatal(err)
	}
	before, err := scenario.WaitFor(t.Context(), c, ns, names, 200*time.Millisecond, 3*time.Minute, nil, scenario.Converged)
	if err != nil {
		t.Fatalf("sessions did not start: %v", err)
	}
	time.Sleep(2 * time.Second) // a few turns write the workspace
	if err := scenario.SetImage(t.Context(), c, ns, "rt", "example.com/lull/turnrunner:v2"); err != nil {
		t.Fatal(err)
	}
	after, err := scenario.WaitFor(t.Context(), c, ns, names, 200*time.Millisecond, 3*time.Minute, nil, scenario.MovedFrom(before))
	if err != nil {
		t.Fatalf("rollout did not converge: %v", err)
	}
	time.Sleep(2 * time.Second) // the new pods' turns read it
	entries, err := journal.ReadDir(env.Runner.JournalDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		oldUID, newUID := before.Pods[name].UID, after.Pods[name].UID
		found := slices.ContainsFunc(entries, func(e journal.Entry) bool {
			return e.Namespace == ns && string(e.PodUID) == newUID && e.Event == journal.Begin && slices.Contains(e.WorkspacePods, oldUID)
		})
		if !found {
			t.Errorf("%s: no turn of the new pod %s read what the old pod %s wrote in the workspace", name, newUID, oldUID)
		}
	}
	rep, err := auditor.Check(env.Runner.JournalDir(), ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range rep.Violations {
		t.Errorf("audit violation: %s", v)
	}
}

// A runtime image the real node cannot pull (no registry serves it) trips
// the brake as on KWOK: the rollout pauses after the first wave, naming
// the failing sessions, and the sessions not yet moved keep their pods; a
// fixed image resumes it and every session converges.
func TestRealNodeImageThatCannotBePulledTripsTheBrake(t *testing.T) {
	requireNode(t)
	const ns, n = "real-brake", 4
	two := intstr.FromInt32(2)
	tmpl := scenario.Template(ns, "rt", "example.com/lull/turnrunner:v1", "--turn-min=200ms", "--turn-max=800ms", "--think-max=200ms")
	tmpl.Spec.UpdatePolicy.MaxUnavailable = &two
	if err := env.OnRealNode(tmpl); err != nil {
		t.Fatal(err)
	}
	names, err := scenario.Launch(t.Context(), c, tmpl, "s", n)
	if err != nil {
		t.Fatal(err)
	}
	before, err := scenario.WaitFor(t.Context(), c, ns, names, 200*time.Millisecond, 3*time.Minute, nil, scenario.Converged)
	if err != nil {
		t.Fatalf("sessions did not start: %v", err)
	}
	if err := scenario.SetImage(t.Context(), c, ns, "rt", "example.invalid/lull/turnrunner:missing"); err != nil {
		t.Fatal(err)
	}
	var failing []string
	waitFor(t, 3*time.Minute, "RolloutPaused=True FailureThreshold", func() bool {
		var tm lullv1.SessionTemplate
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "rt"}, &tm); err != nil {
			return false
		}
		cond := meta.FindStatusCondition(tm.Status.Conditions, lullv1.ConditionRolloutPaused)
		failing = tm.Status.Failing
		return cond != nil && cond.Status == metav1.ConditionTrue && cond.Reason == "FailureThreshold"
	})
	if len(failing) == 0 {
		t.Error("the paused template names no failing session")
	}
	kept := 0
	for _, name := range names {
		var p corev1.Pod
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name + "-0"}, &p); err == nil && string(p.UID) == before.Pods[name].UID {
			kept++
		}
	}
	if kept < n-2 {
		t.Errorf("%d sessions kept their pods, want at least %d: the brake let more than the first wave move", kept, n-2)
	}
	if err := scenario.SetImage(t.Context(), c, ns, "rt", "example.com/lull/turnrunner:v3"); err != nil {
		t.Fatal(err)
	}
	if _, err := scenario.WaitFor(t.Context(), c, ns, names, 200*time.Millisecond, 3*time.Minute, nil, scenario.Converged); err != nil {
		t.Fatalf("after the fix: %v", err)
	}
	rep, err := auditor.Check(env.Runner.JournalDir(), ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range rep.Violations {
		t.Errorf("audit violation: %s", v)
	}
}
