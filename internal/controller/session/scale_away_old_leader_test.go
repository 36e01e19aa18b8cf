package session

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
)

// Guarantee 2 of issue 21: every destructive step is committed by
// the compare-and-swap on the Session, and lands only on what was
// committed.
//
// A suspension's drained pod is scaled away, not deleted: the commitment
// (status.replacement) makes Replicas 0. Until the scale-down carried, as
// its precondition, the resourceVersion of the StatefulSet it was decided
// on, it was a merge patch with none, and an old leader that decided the scale-down and
// paused (a GC pause, a write held up in the network) lands it after the
// user resumed the session, the new leader finished the committed
// replacement (deleted the drained pod) and the StatefulSet controller
// created the resumed session's new pod, whose runtime serves turns: the
// StatefulSet goes to 0 replicas and the StatefulSet controller deletes
// the new pod, which no commitment names, under its turns. Now the new
// pod moves the StatefulSet's status, and the old leader's write meets a
// 409.
func TestScaleAwayLandsOnlyOnTheCommittedPodOldLeader(t *testing.T) {
	var armed, paused atomic.Bool
	stalled, resume := make(chan struct{}), make(chan struct{})
	w := newWorld(t, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			if sts, ok := o.(*appsv1.StatefulSet); ok && armed.Load() && sts.Spec.Replicas != nil && *sts.Spec.Replicas == 0 && paused.CompareAndSwap(false, true) {
				close(stalled)
				<-resume
			}
			return c.Patch(ctx, o, p, opts...)
		},
	}, func(s *lullv1.Session, pod *corev1.Pod) {
		s.Spec.Suspend = true
		s.Status.DrainSequence = 1
		d := &lullv1.DrainRequest{RequestID: drain.RequestID(pod.UID, lullv1.DrainReasonManual, 1), PodUID: pod.UID,
			Reason: lullv1.DrainReasonManual, Sequence: 1, RequestedAt: metav1.NewTime(t0)}
		s.Status.Drain = d
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, RequestID: d.RequestID, State: lullv1.RuntimeDrained}
	})
	ctx := context.Background()
	if _, err := w.reconcile(); err != nil { // the old leader commits the drained pod
		t.Fatal(err)
	}
	if c := w.session().Status.Replacement; c == nil || c.Reason != lullv1.ReplacementDrained {
		t.Fatalf("setup: replacement = %+v, want the drained pod committed", c)
	}
	// The old leader's next step scales the StatefulSet to 0, and stalls.
	armed.Store(true)
	done := make(chan struct{})
	go func() { defer close(done); _, _ = w.reconcile() }()
	select {
	case <-stalled:
	case <-time.After(10 * time.Second):
		t.Fatal("the old leader never scaled the StatefulSet to 0")
	}
	// The user resumes the session.
	s := w.session()
	s.Spec.Suspend = false
	if err := w.c.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	// The new leader finishes the committed replacement: the drained pod goes.
	r2 := &Reconciler{Client: w.c, APIReader: w.c, Recorder: w.events, Clock: w.clock}
	req := ctrl.Request{NamespacedName: w.key}
	if _, err := r2.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if w.podExists() {
		t.Fatal("setup: the new leader did not delete the committed pod")
	}
	// The StatefulSet controller creates the resumed session's pod; its
	// runtime serves.
	sts := w.statefulSet()
	newPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice-0", UID: "pod-2",
		Labels:          map[string]string{lullv1.LabelSession: "alice", appsv1.ControllerRevisionHashLabelKey: "alice-new"},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: lullv1.RuntimeContainerName, Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}
	if err := w.c.Create(ctx, newPod); err != nil {
		t.Fatal(err)
	}
	// and counts it in the StatefulSet's status, as it does every pod it
	// creates or loses: the StatefulSet's resourceVersion moves.
	sts.Status.Replicas, sts.Status.ReadyReplicas, sts.Status.CurrentRevision = 1, 1, "alice-new"
	if err := w.c.Status().Update(ctx, sts); err != nil {
		t.Fatal(err)
	}
	if _, err := r2.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	// The old leader's write lands.
	close(resume)
	<-done
	got := &appsv1.StatefulSet{}
	if err := w.c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "alice"}, got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Replicas == nil || *got.Spec.Replicas != 1 {
		t.Fatalf("StatefulSet replicas = %d after the old leader's write: the resumed session's new pod %s, committed by nothing, is scaled away", ptrDeref(got.Spec.Replicas), newPod.UID)
	}
}

func ptrDeref(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}
