package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// TestControllerFailedPods: a stale pod that has failed is replaced at once,
// without a drain, and the next failed replacement waits out the backoff;
// a failing pod of the update revision is never deleted.
func TestControllerFailedPods(t *testing.T) {
	t.Parallel()
	ns := startManager(t)
	ctx := t.Context()
	n := runs.Add(1)

	tpl := newTemplate(ns, fmt.Sprintf("tpl%d", n), "example.com/runtime:v1")
	if err := admin.Create(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	s := newSession(ns, fmt.Sprintf("f%d", n), tpl.Name)
	if err := admin.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	sts := &appsv1.StatefulSet{}
	eventually(t, 10*time.Second, "StatefulSet is created", func(ctx context.Context) error {
		return admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: s.Name}, sts)
	})

	// gone waits until the pod is deleted and returns when that was seen.
	gone := func(t *testing.T, pod *corev1.Pod) time.Time {
		t.Helper()
		eventually(t, 20*time.Second, "pod "+string(pod.UID)+" is deleted", func(ctx context.Context) error {
			return podGone(ctx, pod)
		})
		return time.Now()
	}
	crashLoop := func(p *corev1.Pod) {
		p.Status.Conditions = nil
		p.Status.ContainerStatuses[0].Ready = false
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
	}

	// The pod fails before the StatefulSet publishes the update revision
	// that makes it stale, so the controller never sees it healthy.
	first := createPodWithStatus(t, sts, "rev-1", func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodFailed
		p.Status.Conditions = nil
		p.Status.ContainerStatuses[0].Ready = false
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}
	})
	setRevisions(t, ns, s.Name, "rev-1", "rev-2")
	firstGone := gone(t, first)
	st := waitStatus(t, ns, s.Name, "the failed replacement is counted", func(st lullv1.SessionStatus) bool {
		return st.FailedReplacements > 0
	})
	if st.FailedReplacements != 1 || st.Drain != nil {
		t.Errorf("after one failed replacement: failedReplacements %d, drain %+v; want 1 and no drain request", st.FailedReplacements, st.Drain)
	}

	// The replacement is stale too (the StatefulSet controller has not
	// caught up) and Pending: its runtime has never started, so it holds no
	// turn and there is nobody to answer a drain. It is replaced without
	// one, but only once the backoff (5s after the first failed
	// replacement) has passed, not in a hot loop.
	second := createPodWithStatus(t, sts, "rev-1", func(p *corev1.Pod) { p.Status = corev1.PodStatus{Phase: corev1.PodPending} })
	waitStatus(t, ns, s.Name, "the controller backs off before replacing the never-started pod", func(st lullv1.SessionStatus) bool {
		c := meta.FindStatusCondition(st.Conditions, lullv1.ConditionUpToDate)
		return st.PodUID == second.UID && c != nil && c.Reason == "ReplacementBackoff"
	})
	secondGone := gone(t, second)
	// The stored replacement time has whole seconds: allow for that.
	if gap := secondGone.Sub(firstGone); gap < 3500*time.Millisecond {
		t.Errorf("never-started pod replaced %s after the first failed one, want the 5s backoff", gap.Round(time.Millisecond))
	}
	st = waitStatus(t, ns, s.Name, "two failed replacements are counted", func(st lullv1.SessionStatus) bool {
		return st.FailedReplacements == 2
	})
	if st.Drain != nil {
		t.Errorf("a never-started pod was asked to drain: %+v", st.Drain)
	}

	// A stale pod whose runtime runs next to a crash-looping sidecar is
	// asked to drain, never deleted for the sidecar's failure.
	third := createPodWithStatus(t, sts, "rev-1", func(p *corev1.Pod) {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: "mesh-proxy", Image: "example.com/proxy:1",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}})
	})
	waitStatus(t, ns, s.Name, "the controller asks the pod with a failing sidecar to drain", func(st lullv1.SessionStatus) bool {
		return st.Drain != nil && st.Drain.PodUID == third.UID
	})
	consistently(t, 2*time.Second, "pod with a failing sidecar is kept", func(ctx context.Context) error {
		p := &corev1.Pod{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(third), p); err != nil {
			return err
		}
		if p.UID != third.UID || p.DeletionTimestamp != nil {
			return errors.New("busy pod deleted for its sidecar's failure")
		}
		return nil
	})
	// Then its runtime fails as well: it is replaced after the backoff.
	third.Status.ContainerStatuses[0].Ready = false
	third.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
	if err := admin.Status().Update(ctx, third); err != nil {
		t.Fatal(err)
	}
	gone(t, third)
	waitStatus(t, ns, s.Name, "three failed replacements are counted", func(st lullv1.SessionStatus) bool {
		return st.FailedReplacements == 3
	})

	// A pod of the update revision that cannot start is never deleted.
	current := createPodWithStatus(t, sts, "rev-2", crashLoop)
	waitStatus(t, ns, s.Name, "the controller sees the failing current pod", func(st lullv1.SessionStatus) bool {
		return st.PodUID == current.UID && meta.IsStatusConditionTrue(st.Conditions, lullv1.ConditionUpToDate)
	})
	consistently(t, 2*time.Second, "failing current pod is kept", func(ctx context.Context) error {
		p := &corev1.Pod{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(current), p); err != nil {
			return err
		}
		if p.UID != current.UID || p.DeletionTimestamp != nil {
			return errors.New("failing current pod was deleted")
		}
		return nil
	})
	st = mustGetSession(t, ns, s.Name).Status
	if st.Phase != lullv1.SessionFailed || meta.IsStatusConditionTrue(st.Conditions, lullv1.ConditionReady) {
		t.Errorf("session with a crash-looping pod: %s, want phase Failed and not Ready", describe(st))
	}
}
