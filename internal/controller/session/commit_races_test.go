package session

import (
	"context"
	"strings"
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

// cutShortCase is a session about to be replaced without a Drained report:
// a drain deadline passed, the Replace strategy, a lifetime drain past its
// deadline, or lull.dev/force-update. The runtime holds a turn. withdraw is
// what makes a second controller withdraw the step (a rollback, a lifetime
// no longer due).
type cutShortCase struct {
	name     string
	reason   lullv1.ReplacementReason
	policy   func(t *lullv1.SessionTemplate)
	edit     func(s *lullv1.Session, pod *corev1.Pod)
	withdraw func(t *testing.T, w *world)
}

func cutShortCases() []cutShortCase {
	busy := func(s *lullv1.Session, pod *corev1.Pod, reason lullv1.DrainReason, deadline time.Time) {
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		pod.CreationTimestamp = metav1.NewTime(t0.Add(-2 * time.Hour))
		id := drain.RequestID(pod.UID, reason, 1)
		at := metav1.NewTime(deadline)
		s.Status.DrainSequence = 1
		s.Status.Drain = &lullv1.DrainRequest{RequestID: id, PodUID: pod.UID, Reason: reason, Sequence: 1,
			RequestedAt: metav1.NewTime(deadline.Add(-30 * time.Second)), Deadline: &at}
		if reason == lullv1.DrainReasonUpdate {
			s.Status.Drain.Revision = "alice-new"
		}
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, RequestID: id, State: lullv1.RuntimeDraining, ActiveTurns: 1}
	}
	rollback := func(t *testing.T, w *world) {
		t.Helper()
		sts := &appsv1.StatefulSet{}
		if err := w.c.Get(context.Background(), w.key, sts); err != nil {
			t.Fatal(err)
		}
		sts.Status.UpdateRevision = w.staleRev // the operator rolled the template back
		if err := w.c.Status().Update(context.Background(), sts); err != nil {
			t.Fatal(err)
		}
	}
	timeout := &metav1.Duration{Duration: 30 * time.Second}
	return []cutShortCase{
		{name: "drain deadline passed", reason: lullv1.ReplacementDrainDeadlineExceeded,
			policy: func(t *lullv1.SessionTemplate) {
				t.Spec.UpdatePolicy = lullv1.UpdatePolicy{DrainTimeout: timeout, OnDrainTimeout: lullv1.DrainTimeoutReplace}
			},
			edit: func(s *lullv1.Session, pod *corev1.Pod) {
				busy(s, pod, lullv1.DrainReasonUpdate, t0.Add(-time.Second))
			},
			withdraw: rollback},
		{name: "strategy Replace", reason: lullv1.ReplacementReplaced,
			policy: func(t *lullv1.SessionTemplate) {
				t.Spec.UpdatePolicy = lullv1.UpdatePolicy{Strategy: lullv1.UpdateStrategyReplace}
			},
			edit: func(s *lullv1.Session, pod *corev1.Pod) {
				busy(s, pod, lullv1.DrainReasonUpdate, t0.Add(-time.Second))
				s.Status.Drain.RequestedAt = *s.Status.Drain.Deadline
			},
			withdraw: rollback},
		{name: "lifetime drain past its deadline", reason: lullv1.ReplacementDrainDeadlineExceeded,
			policy: func(t *lullv1.SessionTemplate) {
				t.Spec.UpdatePolicy = lullv1.UpdatePolicy{Strategy: lullv1.UpdateStrategyPassive, DrainTimeout: timeout, OnDrainTimeout: lullv1.DrainTimeoutReplace}
				t.Spec.MaxLifetime = &metav1.Duration{Duration: time.Hour}
			},
			edit: func(s *lullv1.Session, pod *corev1.Pod) {
				busy(s, pod, lullv1.DrainReasonLifetime, t0.Add(-time.Second))
			},
			withdraw: func(t *testing.T, w *world) {
				t.Helper()
				editTemplate(t, w, func(tmpl *lullv1.SessionTemplate) { tmpl.Spec.MaxLifetime = nil })
			}},
		{name: "force-update", reason: lullv1.ReplacementForced,
			edit: func(s *lullv1.Session, pod *corev1.Pod) {
				pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
				s.Annotations = map[string]string{lullv1.AnnotationForceUpdate: "true", lullv1.AnnotationForceUpdateReason: "CVE-2026-0001"}
				s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, State: lullv1.RuntimeServing, ActiveTurns: 1}
			},
			withdraw: rollback},
	}
}

// editTemplate changes the world's template.
func editTemplate(t *testing.T, w *world, edit func(t *lullv1.SessionTemplate)) {
	t.Helper()
	tmpl := &lullv1.SessionTemplate{}
	if err := w.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "agent"}, tmpl); err != nil {
		t.Fatal(err)
	}
	edit(tmpl)
	if err := w.c.Update(context.Background(), tmpl); err != nil {
		t.Fatal(err)
	}
}

func cutShortWorld(t *testing.T, tc cutShortCase, funcs interceptor.Funcs) *world {
	t.Helper()
	w := newWorld(t, funcs, tc.edit)
	if tc.policy != nil {
		editTemplate(t, w, tc.policy)
	}
	return w
}

// A replacement that cuts a drain short is committed like a drained one:
// status.replacement names the pod and the reason (one status write), the
// delete follows with the pod's UID as precondition, and its Event is a
// Warning (a forced one names who set the annotation and why).
func TestCutShortReplacementIsCommittedBeforeItsDelete(t *testing.T) {
	for _, tc := range cutShortCases() {
		t.Run(tc.name, func(t *testing.T) {
			w := cutShortWorld(t, tc, interceptor.Funcs{})
			if _, err := w.reconcile(); err != nil {
				t.Fatal(err)
			}
			s := w.session()
			if c := s.Status.Replacement; c == nil || c.PodUID != w.podUID || c.Reason != tc.reason {
				t.Fatalf("status.replacement = %+v, want %s committed for pod %s before its delete", c, tc.reason, w.podUID)
			}
			if s.Status.FailedReplacements != 0 || s.Status.LastFailedReplacementTime != nil {
				t.Errorf("a %s replacement counted as a failed one (%d); the failure backoff is for failed pods", tc.reason, s.Status.FailedReplacements)
			}
			if w.podExists() || len(w.deletes) != 1 || w.deletes[0].Preconditions == nil || *w.deletes[0].Preconditions.UID != w.podUID {
				t.Fatalf("deletes = %+v, want one with the pod's UID precondition after the commit", w.deletes)
			}
			if got := w.patches.Load(); got != 1 {
				t.Errorf("status patches = %d, want 1 (the commitment)", got)
			}
			e := <-w.events.Events
			if !strings.HasPrefix(e, corev1.EventTypeWarning+" "+string(tc.reason)+" ") {
				t.Errorf("event %q, want a Warning %s", e, tc.reason)
			}
			if tc.reason == lullv1.ReplacementForced && !strings.Contains(e, "reason: CVE-2026-0001") {
				t.Errorf("forced event %q does not say why", e)
			}
		})
	}
}

type leaderKey struct{}

// An old leader decided a replacement that cuts a drain short and paused
// before its first write. Meanwhile the new leader withdrew the step (the
// template was rolled back, the lifetime is no longer due) and the runtime
// reopened and took a turn. When the old leader wakes, its step lands on a
// Session that has moved on: it must delete nothing.
func TestOldLeaderDeletesNothingOnceTheStepIsWithdrawn(t *testing.T) {
	for _, tc := range cutShortCases() {
		t.Run(tc.name, func(t *testing.T) {
			paused, release := make(chan struct{}), make(chan struct{})
			hold := func(ctx context.Context) {
				if ctx.Value(leaderKey{}) == "old" {
					select {
					case <-paused:
					default:
						close(paused)
						<-release
					}
				}
			}
			w := cutShortWorld(t, tc, interceptor.Funcs{
				SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
					hold(ctx)
					return c.SubResource(sub).Patch(ctx, o, p, opts...)
				},
				Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
					hold(ctx)
					return c.Delete(ctx, o, opts...)
				},
			})
			old := &Reconciler{Client: w.c, APIReader: w.c, Recorder: w.events, Clock: w.clock}
			done := make(chan error, 1)
			go func() {
				ctx := context.WithValue(context.Background(), leaderKey{}, "old")
				_, err := old.Reconcile(ctx, ctrl.Request{NamespacedName: w.key})
				done <- err
			}()
			<-paused

			tc.withdraw(t, w)
			if _, err := w.reconcile(); err != nil { // the new leader
				t.Fatal(err)
			}
			s := w.session()
			if s.Status.Drain != nil || s.Status.Replacement != nil {
				t.Fatalf("the new leader did not withdraw the step: drain %+v, replacement %+v", s.Status.Drain, s.Status.Replacement)
			}
			s.Status.Runtime = &lullv1.RuntimeReport{PodUID: w.podUID, State: lullv1.RuntimeServing, ActiveTurns: 1}
			if err := w.c.Status().Update(context.Background(), s); err != nil { // the runtime reopened and took a turn
				t.Fatal(err)
			}

			close(release)
			<-done
			if !w.podExists() {
				t.Fatal("the old leader deleted the pod under a turn after its step was withdrawn")
			}
			if c := w.session().Status.Replacement; c != nil {
				t.Errorf("the old leader committed %+v on a Session that had moved on", c)
			}
		})
	}
}

// lull.dev/force-update on a suspended session scales its pod away without
// a drain, but only from a commitment: the annotation seen in the cache
// never scales to zero on its own, so an old leader's scale-down cannot
// land on a session resumed and reopened meanwhile. The pod is scaled
// away, not deleted, and the Warning Event names who forced it and why.
func TestForcedSuspensionIsCommittedBeforeItScalesAway(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, func(s *lullv1.Session, pod *corev1.Pod) {
		s.Spec.Suspend = true
		s.Annotations = map[string]string{lullv1.AnnotationForceUpdate: "true", lullv1.AnnotationForceUpdateReason: "node maintenance"}
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, State: lullv1.RuntimeServing, ActiveTurns: 1}
	})
	sts := &appsv1.StatefulSet{}
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Get(context.Background(), w.key, sts); err != nil {
		t.Fatal(err)
	}
	if got := replicasOf(sts); got != 1 {
		t.Fatalf("StatefulSet replicas = %d before the commitment, want 1", got)
	}
	if c := w.session().Status.Replacement; c == nil || c.Reason != lullv1.ReplacementForced || c.PodUID != w.podUID {
		t.Fatalf("replacement = %+v, want the forced suspension committed", c)
	}
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Get(context.Background(), w.key, sts); err != nil {
		t.Fatal(err)
	}
	if got := replicasOf(sts); got != 0 {
		t.Errorf("StatefulSet replicas = %d after the commitment, want 0", got)
	}
	if len(w.deletes) != 0 {
		t.Errorf("deletes = %+v: a suspension's pod is scaled away, not deleted", w.deletes)
	}
	e := <-w.events.Events
	if !strings.HasPrefix(e, corev1.EventTypeWarning+" Forced ") || !strings.Contains(e, "reason: node maintenance") {
		t.Errorf("event %q, want a Warning Forced naming the reason", e)
	}
}

// replicasOf is the StatefulSet's spec.replicas, 1 when unset (the API's
// default).
func replicasOf(sts *appsv1.StatefulSet) int32 {
	if sts.Spec.Replicas == nil {
		return 1
	}
	return *sts.Spec.Replicas
}
