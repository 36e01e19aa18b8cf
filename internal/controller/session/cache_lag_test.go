package session

import (
	"context"
	"sync/atomic"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// liveReader reads through c with cached set to false, so an interceptor
// can tell the reconciler's cached reads from its live (APIReader) ones.
type liveReader struct {
	c    client.Reader
	live *atomic.Bool
}

func (l liveReader) Get(ctx context.Context, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
	l.live.Store(true)
	defer l.live.Store(false)
	return l.c.Get(ctx, key, o, opts...)
}

func (l liveReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	l.live.Store(true)
	defer l.live.Store(false)
	return l.c.List(ctx, list, opts...)
}

// Scaling a suspended session to zero is a destructive step, and the
// protocol says every destructive step is confirmed against the API server
// and happens only once a Drained replacement is committed. rollout.Replicas
// returns 0 whenever the cached pod is nil, and the reconciler feeds it the
// pod from the cache, unconfirmed.
//
//  1. The session's pod alice-0 (UID pod-1) was just created by the
//     StatefulSet controller; its runtime started, published Serving and
//     accepted two turns (clients that were told "retry after reconnect"
//     come back at once). The Session informer has delivered that report.
//  2. The pod informer lags the Session informer: the cache has not seen
//     alice-0 yet.
//  3. The user suspends the session.
//  4. The reconciler reads the pod from the cache (not found), computes
//     Replicas = 0 and patches the StatefulSet to replicas 0: the
//     StatefulSet controller deletes alice-0 with two turns in flight, with
//     no drain request, no Drained report and no commitment. The session's
//     own status even names the pod and its active turns.
func TestSuspendNeverScalesAwayAPodTheCacheHasNotSeen(t *testing.T) {
	var live atomic.Bool
	w := newWorld(t, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
			if _, ok := o.(*corev1.Pod); ok && !live.Load() {
				return apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, key.Name) // not in the cache yet
			}
			return c.Get(ctx, key, o, opts...)
		},
	}, func(s *lullv1.Session, pod *corev1.Pod) {
		s.Spec.Suspend = true
		pod.Labels[appsv1.ControllerRevisionHashLabelKey] = "alice-new"
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, State: lullv1.RuntimeServing, ActiveTurns: 2}
	})
	w.r.APIReader = liveReader{c: w.c, live: &live}
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	sts := &appsv1.StatefulSet{}
	if err := w.c.Get(context.Background(), w.key, sts); err != nil {
		t.Fatal(err)
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 1 {
		t.Fatalf("StatefulSet scaled to %d: pod %s holding 2 turns (its runtime's report is in status) would be deleted "+
			"without a drain, because the pod cache had not seen it", *sts.Spec.Replicas, w.podUID)
	}
}

// A runtime that starts between a NeverStarted commitment and the delete
// cannot be deleted under a turn: it refuses turns while status.replacement
// names its pod, and its opening report is conditional on the Session
// version it saw, so it cannot open on a view from before the commitment
// (runtime: TestOpeningReportIsConditionalOnTheSessionItSaw,
// TestRuntimeRefusesTurnsWhileItsPodIsCommittedForReplacement). The
// controller alone cannot close that window: no delete is atomic with a
// Session read.

// A committed replacement whose pod the cache has not seen (the pod
// informer lags) is neither withdrawn nor forgotten: the pod is read from
// the API server, and the commitment finished.
func TestCommitmentSurvivesAPodCacheThatLags(t *testing.T) {
	var live atomic.Bool
	w := newWorld(t, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
			if _, ok := o.(*corev1.Pod); ok && !live.Load() {
				return apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, key.Name)
			}
			return c.Get(ctx, key, o, opts...)
		},
	}, func(s *lullv1.Session, pod *corev1.Pod) {
		id := "update-0123456789abcdef"
		s.Status.Drain = &lullv1.DrainRequest{RequestID: id, PodUID: pod.UID, Reason: lullv1.DrainReasonUpdate, Revision: "alice-new", Sequence: 1}
		s.Status.DrainSequence = 1
		s.Status.Replacement = &lullv1.Replacement{PodUID: pod.UID, Reason: lullv1.ReplacementDrained, RequestID: id}
	})
	w.r.APIReader = liveReader{c: w.c, live: &live}
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if w.podExists() {
		t.Error("the committed pod was not deleted")
	}
	if s := w.session(); s.Status.Drain == nil || s.Status.Replacement == nil {
		t.Errorf("drain %+v, replacement %+v: the commitment was dropped because the cache lacked the pod", s.Status.Drain, s.Status.Replacement)
	}
}
