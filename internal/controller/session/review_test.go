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
	"lull.dev/lull/drain"
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

// A never-started (or failed) stale pod is committed on the Session with the
// Session's resourceVersion as a precondition, then deleted with the pod's
// UID and resourceVersion. Nothing ties the delete to the Session any more:
// a runtime that starts between the commit and the delete, publishes its
// first report (after which it accepts turns, as the protocol allows) and
// takes a turn, is deleted anyway, as long as the kubelet has not yet
// published the runtime container's new state (the very lag the report
// check in NeverStarted exists to cover).
//
//  1. alice-0 (UID pod-1) is stale and Pending: its runtime container is
//     waiting in ContainerCreating, restart count 0, no report names it.
//  2. The controller decides NeverStarted, reads the Session live, decides
//     the same, and commits status.replacement = {pod-1, NeverStarted}.
//  3. Right after the commit, the runtime starts, publishes Serving for
//     pod-1 (no precondition: it owns status.runtime) and accepts a turn.
//     The kubelet has not yet written the container's Running state, so
//     the pod's resourceVersion is unchanged.
//  4. The controller deletes alice-0 with UID + resourceVersion
//     preconditions: both still match, and a pod holding a turn is deleted
//     without any Drained report.
func TestNeverStartedCommitDoesNotDeleteARuntimeThatReportedAfterIt(t *testing.T) {
	var w *world
	var commits atomic.Int32
	w = newWorld(t, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			if err := c.SubResource(sub).Patch(ctx, o, p, opts...); err != nil {
				return err
			}
			if commits.Add(1) == 1 {
				// The runtime's first report, written just after the commit.
				rep, err := drain.EncodeReport(&lullv1.RuntimeReport{PodUID: w.podUID, State: lullv1.RuntimeServing, ActiveTurns: 1})
				if err != nil {
					return err
				}
				s := &lullv1.Session{}
				s.Namespace, s.Name = w.key.Namespace, w.key.Name
				if err := c.SubResource("status").Patch(ctx, s, client.RawPatch("application/merge-patch+json", rep)); err != nil {
					return err
				}
			}
			return nil
		},
	}, func(_ *lullv1.Session, pod *corev1.Pod) {
		pod.Status.Phase = corev1.PodPending
		pod.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
	})
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if r := w.session().Status.Runtime; r == nil || r.PodUID != w.podUID || r.ActiveTurns != 1 {
		t.Fatalf("test setup: the runtime's report did not land: %+v", r)
	}
	if !w.podExists() {
		t.Fatalf("pod %s deleted as NeverStarted although its runtime had reported (1 active turn) before the delete", w.podUID)
	}
}
