package session

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/render"
	"lull.dev/lull/internal/rollout"
)

// Guarantee 4 of issue 21: a session not failing for its revision's sake
// never feeds the brake.
//
// The scenario: the namespace has a ResourceQuota on the count of
// ServiceAccounts (count/serviceaccounts, common in multi-tenant clusters),
// and it is full. Bob creates a new Session of the template. lull renders
// its runtime identity first (reconcileIdentity), and the API server
// refuses the ServiceAccount: 403 "exceeded quota". renderFailed turns
// every Forbidden into RenderFailed, so the session is blocked with Ready
// False RenderFailed and no pod (status.podUID and templateRevision
// empty). After progressDeadlineSeconds (10 minutes by default) DecideBrake
// counts it as a session the revision left without a pod, and at the
// default failureThreshold of 1 the template's rollout pauses with
// FailureThreshold, blaming the revision for the namespace's capacity,
// and stays paused after the quota is raised, until someone runs
// `lull rollout resume`. The brake skips a pod refused by a quota
// (PodQuotaExceeded: "the namespace's capacity is no revision's fault")
// but not the session's own objects refused by the same kind of quota,
// which no revision of the template can change either.
func TestBrakeIgnoresASessionWhoseIdentityAQuotaRefuses(t *testing.T) {
	quota := func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
		if _, ok := o.(*corev1.ServiceAccount); ok {
			return apierrors.NewForbidden(schema.GroupResource{Resource: "serviceaccounts"}, o.GetName(),
				errString("exceeded quota: accounts, requested: count/serviceaccounts=1, used: count/serviceaccounts=20, limited: count/serviceaccounts=20"))
		}
		return c.Create(ctx, o, opts...)
	}
	w := newWorld(t, interceptor.Funcs{Create: quota}, nil)
	ctx := context.Background()
	// A new session: nothing of it exists yet.
	for _, o := range []client.Object{
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice-0"}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice"}},
	} {
		if err := w.c.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if r := conditionReason(w.session().Status.Conditions, lullv1.ConditionReady); r == "" {
		t.Fatalf("setup: the refused session has no Ready condition")
	}
	// Tried again on the blocked schedule for 11 minutes.
	for at := time.Duration(0); at <= 11*time.Minute; at += 5 * time.Minute / 2 {
		w.clock.SetTime(t0.Add(at))
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	now := t0.Add(11 * time.Minute)
	w.clock.SetTime(now)
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	tmpl := &lullv1.SessionTemplate{}
	if err := w.c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "agent"}, tmpl); err != nil {
		t.Fatal(err)
	}
	s := w.session()
	ready := meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionReady)
	if b := rollout.DecideBrake(tmpl, render.TemplateRevision(tmpl), []lullv1.Session{*s}, now); b.Paused || len(b.Failing) != 0 {
		t.Fatalf("a session whose ServiceAccount a ResourceQuota refuses (Ready %s %s since %s) pauses the rollout of its template: paused=%v failing=%v: %s",
			ready.Status, ready.Reason, ready.LastTransitionTime.UTC().Format(time.RFC3339), b.Paused, b.Failing, b.Message)
	}
}
