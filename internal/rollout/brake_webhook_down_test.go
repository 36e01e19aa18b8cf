package rollout

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Guarantee 4 of issue 21: a session not failing for its revision's sake
// never feeds the brake.
//
// The scenario: the cluster runs a validating admission webhook on pods
// (failurePolicy Fail: a policy engine). Its backend goes down for 15
// minutes (a bad deploy, its certificate expired, its nodes drained).
// During the outage alice, a new session of the "agent" template, is
// created (or a session is resumed, or its pod is evicted from a lost
// node): the StatefulSet controller's create of her pod fails with
// "Internal error occurred: failed calling webhook ...: connect:
// connection refused". The webhook denied nothing: it was never reached,
// and it refuses a pod of every revision alike, as a full quota does.
// alice has no pod, Ready False and UpToDate Unknown PodCreateRefused,
// for 11 minutes, past progressDeadlineSeconds.
//
// DecideBrake counts her as failing on the update revision: at the
// default failureThreshold of 1 the rollout of "new" pauses with
// FailureThreshold and stays paused (status.pausedRevision) after the
// webhook is back and her pod runs, until someone runs `lull rollout
// resume`. The brake exempts a quota's refusal, a namespace's capacity,
// but not an unreachable webhook's, which no revision made either.
func TestBrakeIgnoresASessionWhosePodAnUnreachableWebhookCannotAdmit(t *testing.T) {
	const rev = "new"
	began := now.Add(-11 * time.Minute)
	const unreachable = `create Pod alice-0 in StatefulSet alice failed error: Internal error occurred: failed calling webhook "pods.policy.example.com": ` +
		`failed to call webhook: Post "https://policy.policy-system.svc:443/validate?timeout=10s": dial tcp 10.96.14.7:443: connect: connection refused`
	s := refusedSince(t, began, unreachable, nil, func(r *Refusal) {
		if r == nil {
			t.Fatal("setup: no refusal")
		}
	})
	bob := onRevision("bob", "old", metav1.ConditionTrue, lullv1.ReasonPodReady, time.Hour) // waits to move to "new"
	tpl := &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}
	if b := DecideBrake(tpl, rev, []lullv1.Session{*s, bob}, now); b.Paused || len(b.Failing) != 0 {
		t.Fatalf("a session whose pod an unreachable webhook could not admit for 11 minutes pauses the rollout of revision %s: paused=%v failing=%v: %s",
			rev, b.Paused, b.Failing, b.Message)
	}
}

// refusedSince is alice, a session of the "agent" template with
// conditions, whose pod the StatefulSet controller has failed to create
// since began, each time with a FailedCreate Event saying message: her
// status as lull writes it (BlockedStatus) at the first refusal and at the
// last, a second ago. judge sees PodCreateRefusal's judgement of each and
// fails the test on one it does not expect. The fixture fails the test
// when her status still names a pod or a revision.
func refusedSince(t *testing.T, began time.Time, message string, conditions []metav1.Condition, judge func(r *Refusal)) *lullv1.Session {
	t.Helper()
	return refusedSinceAmong(t, began, message, conditions, nil, judge)
}

// refusedSinceAmong is refusedSince in a namespace whose ResourceQuotas
// are quotas.
func refusedSinceAmong(t *testing.T, began time.Time, message string, conditions []metav1.Condition, quotas []corev1.ResourceQuota, judge func(r *Refusal)) *lullv1.Session {
	t.Helper()
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice", UID: "sts-1"},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1)}}
	refused := corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice.1", CreationTimestamp: metav1.NewTime(began)},
		InvolvedObject: corev1.ObjectReference{Kind: "StatefulSet", Namespace: "ns", Name: "alice", UID: "sts-1"}, Reason: "FailedCreate",
		Message: message, LastTimestamp: metav1.NewTime(began)}
	s := &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "alice", Namespace: "ns", Generation: 1},
		Spec: lullv1.SessionSpec{TemplateRef: lullv1.TemplateReference{Name: "agent"}}}
	s.Status.Conditions = conditions
	for _, at := range []time.Time{began, now.Add(-time.Second)} {
		refused.LastTimestamp = metav1.NewTime(at)
		o := Observed{Now: at, Session: s, StatefulSet: sts, Quotas: quotas}
		r := PodCreateRefusal(o, []corev1.Event{refused}, "agent")
		judge(r)
		st, _ := BlockedStatus(o, r.Reason, r.Message)
		s.Status = st
	}
	if s.Status.PodUID != "" || s.Status.TemplateRevision != "" {
		t.Fatalf("setup: the refused session's status names pod %q, revision %q", s.Status.PodUID, s.Status.TemplateRevision)
	}
	return s
}
