package session

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
)

// setIdlePolicy gives the world's template an idle policy.
func setIdlePolicy(t *testing.T, w *world, p lullv1.IdlePolicy) {
	t.Helper()
	tmpl := &lullv1.SessionTemplate{}
	if err := w.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "agent"}, tmpl); err != nil {
		t.Fatal(err)
	}
	tmpl.Spec.Idle = &p
	if err := w.c.Update(context.Background(), tmpl); err != nil {
		t.Fatal(err)
	}
}

// idleDrainedWorld: alice's current pod has been idle for an hour (judged
// idle before), under suspendAfter 30m; an Idle drain request is
// outstanding and the runtime answered Drained with a fresh report.
func idleDrainedWorld(t *testing.T, funcs interceptor.Funcs) *world {
	w := newWorld(t, funcs, func(s *lullv1.Session, pod *corev1.Pod) {
		pod.Labels[appsv1.ControllerRevisionHashLabelKey] = "alice-new"
		pod.CreationTimestamp = metav1.NewTime(t0.Add(-2 * time.Hour))
		last := metav1.NewTime(t0.Add(-time.Hour))
		id := drain.RequestID(pod.UID, lullv1.DrainReasonIdle, 1)
		s.Status.DrainSequence = 1
		s.Status.Drain = &lullv1.DrainRequest{RequestID: id, PodUID: pod.UID, Reason: lullv1.DrainReasonIdle, Sequence: 1, RequestedAt: metav1.NewTime(t0.Add(-time.Second))}
		reported := metav1.NewTime(t0.Add(-time.Second))
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, RequestID: id, State: lullv1.RuntimeDrained,
			LastActivity: &last, RefreshSeconds: 10, ReportedAt: &reported}
		s.Status.Lifecycle = &lullv1.LifecycleStatus{IdlePodUID: pod.UID, IdleSince: &last, IdleActivity: &last}
	})
	setIdlePolicy(t, w, lullv1.IdlePolicy{SuspendAfter: &metav1.Duration{Duration: 30 * time.Minute}})
	return w
}

// Guarantee 4: a cull is a drain, then a suspension (StatefulSet to zero,
// claims kept). The drained pod is committed, then the session suspended:
// the pod must not be deleted on its own (the StatefulSet would only make a
// new one, and the session would never be suspended).
func TestIdleCullCommitSuspendsInsteadOfDeletingThePod(t *testing.T) {
	w := idleDrainedWorld(t, interceptor.Funcs{})
	for i := range 3 {
		if _, err := w.reconcile(); err != nil {
			t.Fatalf("reconcile %d: %v", i, err)
		}
	}
	s := w.session()
	if len(w.deletes) != 0 {
		t.Errorf("%d deletes after the idle commit; the idle-culled pod must be scaled away by the suspension, not deleted", len(w.deletes))
	}
	if !s.Spec.Suspend {
		t.Errorf("spec.suspend = false after an idle cull's drain was committed; want the session suspended (replacement %+v)", s.Status.Replacement)
	}
	sts := &appsv1.StatefulSet{}
	if err := w.c.Get(context.Background(), w.key, sts); err != nil {
		t.Fatal(err)
	}
	if s.Spec.Suspend && (sts.Spec.Replicas == nil || *sts.Spec.Replicas != 0) {
		t.Errorf("StatefulSet replicas %v after the idle suspension; want 0", sts.Spec.Replicas)
	}
	if got := w.eventReasons(); len(got) != 1 || got[0] != "IdleSuspend" {
		t.Errorf("events %v, want [IdleSuspend]", got)
	}
}

// Guarantee 4, delete: the drained pod is committed, then the Session is
// deleted (UID and resourceVersion preconditions); the pod is not deleted
// on its own first (the StatefulSet would replace it, and the session,
// judged again on a new pod, would never be deleted).
func TestIdleDeleteCommitDeletesTheSessionNotThePod(t *testing.T) {
	w := idleDrainedWorld(t, interceptor.Funcs{})
	setIdlePolicy(t, w, lullv1.IdlePolicy{DeleteAfter: &metav1.Duration{Duration: 30 * time.Minute}})
	for i := range 2 {
		if _, err := w.reconcile(); err != nil {
			t.Fatalf("reconcile %d: %v", i, err)
		}
	}
	if len(w.deletes) != 1 || w.deletes[0].Preconditions == nil || w.deletes[0].Preconditions.ResourceVersion == nil {
		t.Fatalf("deletes %+v; want exactly one, of the Session, with its resourceVersion as a precondition", w.deletes)
	}
	if !w.podExists() {
		t.Error("the pod was deleted directly; it goes with the session")
	}
	if got := w.eventReasons(); len(got) != 1 || got[0] != "IdleDelete" {
		t.Errorf("events %v, want [IdleDelete]", got)
	}
}
