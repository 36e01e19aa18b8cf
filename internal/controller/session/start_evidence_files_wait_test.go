package session

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/files"
	"lull.dev/lull/internal/render"
)

// Guarantee 3 of issue 21: evidence that a runtime started, once seen, is
// recorded by the controller and cannot be erased by a later write to
// status.runtime (and so guarantee 1: such a pod is never judged never
// started and deleted without a drain).
//
// The scenario: alice's stale pod runs a runtime that has published
// Serving and holds a turn, while the kubelet still shows its container
// ContainerCreating (it publishes late). Her template has just gained a
// files ConfigMap the template controller has not created yet. The
// reconcile reads the report, then waits for the files (waitForFiles):
// a fresh FilesNotReady is a passing state, so nothing is written for
// SettleDelay, and unlike the rollout step's settle (rollout.RecordStart)
// this wait does not write the start it saw. A later write replaces
// status.runtime (an admin's, or the previous pod's runtime's delayed
// last report). The ConfigMap appears, the StatefulSet mounts it and the
// StatefulSet controller publishes the new revision: the pod, stale, with
// no report and no record, and the kubelet still showing no start, is
// judged NeverStarted, committed and deleted under its turn.
func TestStartSeenWhileWaitingForFilesSurvivesAnOverwrittenReport(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, func(s *lullv1.Session, pod *corev1.Pod) {
		creating(pod)
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, State: lullv1.RuntimeServing, ActiveTurns: 1}
	})
	ctx := context.Background()
	tmpl := &lullv1.SessionTemplate{}
	if err := w.c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "agent"}, tmpl); err != nil {
		t.Fatal(err)
	}
	tmpl.Spec.Files = &lullv1.Files{MountPath: "/etc/runtime", Items: []lullv1.FileItem{{Name: "config.yaml", Content: ptr.To("a")}}}
	if err := w.c.Update(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	if _, err := w.reconcile(); err != nil { // sees the report, waits for the files
		t.Fatal(err)
	}
	overwriteReport(t, w, &lullv1.RuntimeReport{PodUID: "pod-0", State: lullv1.RuntimeDrained})

	desired, err := render.FilesConfigMap(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := files.Create(ctx, w.c, w.c, desired); err != nil {
		t.Fatal(err)
	}
	if _, err := w.reconcile(); err != nil { // the StatefulSet mounts the files
		t.Fatal(err)
	}
	// The StatefulSet controller publishes the new revision.
	sts := &appsv1.StatefulSet{}
	if err := w.c.Get(ctx, w.key, sts); err != nil {
		t.Fatal(err)
	}
	sts.Status.ObservedGeneration, sts.Status.UpdateRevision = sts.Generation, "alice-files"
	if err := w.c.Status().Update(ctx, sts); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	s := w.session()
	if !w.podExists() || s.Status.Replacement != nil {
		t.Fatalf("pod deleted (replacement %+v, record %q) after status.runtime was overwritten: its runtime was seen started, holding a turn, while the session waited for its files",
			s.Status.Replacement, s.Status.StartedPodUID)
	}
}
