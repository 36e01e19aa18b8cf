package session

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// refusedWorld is a session whose pod is gone and whose StatefulSet's new
// pod a ResourceQuota of 0 pods refuses, as the StatefulSet controller's
// FailedCreate Event on the StatefulSet says.
func refusedWorld(t *testing.T) (*world, *corev1.Event, *corev1.ResourceQuota) {
	t.Helper()
	w := newWorld(t, interceptor.Funcs{}, nil)
	ctx := context.Background()
	if err := w.c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice-0"}}); err != nil {
		t.Fatal(err)
	}
	w.deletes = nil
	zero := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pods"}, Spec: corev1.ResourceQuotaSpec{Hard: zero},
		Status: corev1.ResourceQuotaStatus{Hard: zero, Used: zero}}
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice.1"},
		InvolvedObject: corev1.ObjectReference{Kind: "StatefulSet", Namespace: "ns", Name: "alice", UID: "sts-1", APIVersion: "apps/v1"},
		Reason:         "FailedCreate", Type: corev1.EventTypeWarning, LastTimestamp: metav1.NewTime(t0.Add(-time.Second)),
		Message: `create Pod alice-0 in StatefulSet alice failed error: pods "alice-0" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=0, limited: pods=0`}
	if err := w.c.Create(ctx, quota); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Create(ctx, ev); err != nil {
		t.Fatal(err)
	}
	return w, ev, quota
}

func (w *world) retriedAt() string {
	w.t.Helper()
	return w.statefulSet().Annotations[lullv1.AnnotationCreateRetriedAt]
}

// A pod the StatefulSet controller cannot create (a full quota) is never
// waited for in silence: the session's Ready and UpToDate conditions name
// the refusal as the API server worded it, the quota and the fix, with one
// Warning Event; lull asks the StatefulSet controller again on the blocked
// schedule and as soon as the quota has room; the condition clears once
// the pod exists.
func TestPodRefusedByAQuotaIsNamedRetriedAndCleared(t *testing.T) {
	w, ev, quota := refusedWorld(t)
	ctx := context.Background()
	res, err := w.reconcile()
	if err != nil {
		t.Fatal(err)
	}
	s := w.session()
	for _, typ := range []string{lullv1.ConditionReady, lullv1.ConditionUpToDate} {
		c := meta.FindStatusCondition(s.Status.Conditions, typ)
		if c == nil || c.Reason != lullv1.ReasonPodQuotaExceeded || !strings.Contains(c.Message, "exceeded quota: pods, requested: pods=1") ||
			!strings.Contains(c.Message, "raise ResourceQuota pods") {
			t.Fatalf("%s = %+v, want %s quoting the API server and naming the quota", typ, c, lullv1.ReasonPodQuotaExceeded)
		}
	}
	if n := w.count(lullv1.ReasonPodQuotaExceeded); n != 1 {
		t.Errorf("%s Warning Events = %d, want 1", lullv1.ReasonPodQuotaExceeded, n)
	}
	if res.RequeueAfter != 5*time.Second {
		t.Errorf("RequeueAfter = %s, want the blocked schedule's 5s", res.RequeueAfter)
	}
	if got := w.retriedAt(); got != "" {
		t.Errorf("asked again at once (%s): the StatefulSet controller has just tried", got)
	}

	// The first retry of the schedule asks the StatefulSet controller again.
	w.clock.SetTime(t0.Add(6 * time.Second))
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	asked := w.retriedAt()
	if asked == "" {
		t.Fatal("the StatefulSet controller was not asked again at the first retry")
	}
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if w.retriedAt() != asked {
		t.Error("asked again within the same retry")
	}
	if n := w.count(lullv1.ReasonPodQuotaExceeded); n != 0 {
		t.Errorf("%d more Warning Events for the same refusal", n)
	}

	// Refused once more; then the quota is raised: asked at once (5 s
	// after the last ask), not at the schedule's next retry (+15 s).
	ev.LastTimestamp = metav1.NewTime(t0.Add(7 * time.Second))
	if err := w.c.Update(ctx, ev); err != nil {
		t.Fatal(err)
	}
	w.clock.SetTime(t0.Add(8 * time.Second))
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if w.retriedAt() != asked {
		t.Fatal("asked again while the quota is still full")
	}
	one := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")}
	quota.Spec.Hard, quota.Status.Hard = one, one
	if err := w.c.Update(ctx, quota); err != nil {
		t.Fatal(err)
	}
	if reqs := w.r.quotaToSessions(ctx, quota); len(reqs) != 1 || reqs[0].NamespacedName != w.key {
		t.Errorf("a quota change enqueues %v, want the refused session", reqs)
	}
	w.clock.SetTime(t0.Add(11 * time.Second)) // the schedule's next retry is at +15 s
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if got := w.retriedAt(); got != t0.Add(11*time.Second).Format(time.RFC3339Nano) {
		t.Fatalf("retried-at = %q after the quota was raised, want the reconcile's time", got)
	}

	// The StatefulSet controller creates the pod: the refusal is over.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice-0", UID: "pod-2",
		Labels: map[string]string{lullv1.LabelSession: "alice", appsv1.ControllerRevisionHashLabelKey: "alice-new"}},
		Status: corev1.PodStatus{Phase: corev1.PodPending}}
	if err := w.c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	// A new pod's first states are passing: written once they have
	// lasted SettleDelay.
	for _, at := range []time.Duration{20 * time.Second, 20*time.Second + SettleDelay} {
		w.clock.SetTime(t0.Add(at))
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range w.session().Status.Conditions {
		if c.Reason == lullv1.ReasonPodQuotaExceeded {
			t.Errorf("%s still says %s with its pod created", c.Type, c.Reason)
		}
	}
}

// Another StatefulSet's refusal under the session's name (its UID is not
// the session's StatefulSet's) says nothing about the session.
func TestRefusalOfAnotherStatefulSetIsNotTheSessions(t *testing.T) {
	w, ev, _ := refusedWorld(t)
	ev.InvolvedObject.UID = types.UID("someone-else")
	if err := w.c.Update(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(w.session().Status.Conditions, lullv1.ConditionReady); c != nil && c.Reason == lullv1.ReasonPodQuotaExceeded {
		t.Errorf("Ready = %+v: another StatefulSet's refusal", c)
	}
}

// A ResourceQuota that refuses the pod and is scoped (here: the
// PriorityClass "high", which the template's pod asks for) refuses it for
// the revision's sake: whether the pod counts at all is the pod's spec.
// The session is PodCreateRefused, which the brake counts, with the scope
// and the template's fix named; and it is still among the sessions a
// change of the namespace's quotas wakes, so a raised quota is met at once.
func TestPodRefusedByAScopedQuotaIsTheRevisions(t *testing.T) {
	w, _, quota := refusedWorld(t)
	ctx := context.Background()
	quota.Spec.ScopeSelector = &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{
		ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn, Values: []string{"high"}}}}
	if err := w.c.Update(ctx, quota); err != nil {
		t.Fatal(err)
	}
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{lullv1.ConditionReady, lullv1.ConditionUpToDate} {
		c := meta.FindStatusCondition(w.session().Status.Conditions, typ)
		if c == nil || c.Reason != lullv1.ReasonPodCreateRefused || !strings.Contains(c.Message, "exceeded quota: pods") ||
			!strings.Contains(c.Message, "PriorityClass In [high]") || !strings.Contains(c.Message, "change the template") {
			t.Fatalf("%s = %+v, want %s naming the quota's scope and the template's fix", typ, c, lullv1.ReasonPodCreateRefused)
		}
	}
	if reqs := w.r.quotaToSessions(ctx, quota); len(reqs) != 1 || reqs[0].NamespacedName != w.key {
		t.Errorf("a change of the scoped quota wakes %v, want the session it refuses", reqs)
	}
}

// The same quota unscoped is the namespace's policy: PodQuotaExceeded,
// which the brake does not count, and nothing said of a quota not read.
func TestPodRefusedByAnUnscopedQuotaIsTheNamespaces(t *testing.T) {
	w, _, _ := refusedWorld(t)
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(w.session().Status.Conditions, lullv1.ConditionUpToDate)
	if c == nil || c.Reason != lullv1.ReasonPodQuotaExceeded || strings.Contains(c.Message, "could not be read") {
		t.Fatalf("UpToDate = %+v, want %s from the quota read", c, lullv1.ReasonPodQuotaExceeded)
	}
}
