package rollout

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

const quotaMessage = `create Pod s-0 in StatefulSet s failed error: pods "s-0" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=2, limited: pods=2`

func failedCreate(msg string, at time.Time) corev1.Event {
	return corev1.Event{Reason: "FailedCreate", Message: msg, LastTimestamp: metav1.NewTime(at)}
}

// Every refusal the StatefulSet controller records for a session without
// its pod is named, with the API server's words and a fix fitting its
// cause; a refusal that is over (stale, from before the pod the session
// had since, a StatefulSet that wants no pod, a pod that exists) is not.
func TestPodCreateRefusalNamesTheCauseAndItsFix(t *testing.T) {
	ready := func(reason string, status metav1.ConditionStatus, at time.Time) []metav1.Condition {
		return []metav1.Condition{{Type: lullv1.ConditionReady, Status: status, Reason: reason, LastTransitionTime: metav1.NewTime(at)}}
	}
	for _, tc := range []struct {
		name       string
		events     []corev1.Event
		conditions []metav1.Condition
		noPod      bool
		replicas   int32
		reason     string // "" none
		fix        string
	}{
		{name: "quota", events: []corev1.Event{failedCreate(quotaMessage, now.Add(-time.Second))}, noPod: true, replicas: 1,
			reason: lullv1.ReasonPodQuotaExceeded, fix: "raise ResourceQuota pods of namespace ns"},
		{name: "pod security", events: []corev1.Event{failedCreate(`create Pod s-0 in StatefulSet s failed error: pods "s-0" is forbidden: violates PodSecurity "restricted:latest": privileged`, now)},
			noPod: true, replicas: 1, reason: lullv1.ReasonPodCreateRefused, fix: "Pod Security level"},
		{name: "webhook", events: []corev1.Event{failedCreate(`create Pod s-0 in StatefulSet s failed error: admission webhook "policy.example.com" denied the request: no`, now)},
			noPod: true, replicas: 1, reason: lullv1.ReasonPodCreateRefused, fix: "so the webhook admits its pod"},
		{name: "limit range", events: []corev1.Event{failedCreate(`create Pod s-0 in StatefulSet s failed error: pods "s-0" is forbidden: maximum cpu usage per Container is 1, but limit is 2`, now)},
			noPod: true, replicas: 1, reason: lullv1.ReasonPodCreateRefused, fix: "LimitRange"},
		{name: "latest of several", events: []corev1.Event{failedCreate(`old: violates PodSecurity`, now.Add(-time.Minute)), failedCreate(quotaMessage, now)},
			noPod: true, replicas: 1, reason: lullv1.ReasonPodQuotaExceeded},
		{name: "stale", events: []corev1.Event{failedCreate(quotaMessage, now.Add(-RefusalFresh-time.Second))}, noPod: true, replicas: 1},
		{name: "before the session's pod was last lost", events: []corev1.Event{failedCreate(quotaMessage, now.Add(-2*time.Minute))},
			conditions: ready(lullv1.ReasonPodPending, metav1.ConditionFalse, now.Add(-time.Minute)), noPod: true, replicas: 1},
		{name: "before the session's pod was last Ready", events: []corev1.Event{failedCreate(quotaMessage, now.Add(-2*time.Minute))},
			conditions: ready("PodReady", metav1.ConditionTrue, now.Add(-time.Minute-time.Second)), noPod: true, replicas: 1},
		{name: "after the pod went, before the status said so (a replacement settles late)", events: []corev1.Event{failedCreate(quotaMessage, now.Add(-time.Minute))},
			conditions: ready(lullv1.ReasonPodPending, metav1.ConditionFalse, now.Add(-time.Minute+20*time.Second)), noPod: true, replicas: 1, reason: lullv1.ReasonPodQuotaExceeded},
		{name: "already refused, the refusal seen again", events: []corev1.Event{failedCreate(quotaMessage, now.Add(-2*time.Minute))},
			conditions: ready(lullv1.ReasonPodQuotaExceeded, metav1.ConditionFalse, now.Add(-time.Minute)), noPod: true, replicas: 1, reason: lullv1.ReasonPodQuotaExceeded},
		{name: "pod exists", events: []corev1.Event{failedCreate(quotaMessage, now)}, replicas: 1},
		{name: "no replica wanted", events: []corev1.Event{failedCreate(quotaMessage, now)}, noPod: true, replicas: 0},
		{name: "no event", noPod: true, replicas: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture()
			f.o.StatefulSet.Namespace = "ns"
			f.o.StatefulSet.Spec.Replicas = &tc.replicas
			f.o.Session.Status.Conditions = tc.conditions
			if tc.noPod {
				f.o.Pod = nil
			}
			r := PodCreateRefusal(f.o, tc.events, "t")
			switch {
			case tc.reason == "" && r != nil:
				t.Fatalf("refusal %+v, want none", r)
			case tc.reason == "":
				return
			case r == nil:
				t.Fatalf("no refusal, want %s", tc.reason)
			}
			if r.Reason != tc.reason || !strings.Contains(r.Message, "StatefulSet s") || !strings.Contains(r.Message, "failed error:") || !strings.Contains(r.Message, tc.fix) {
				t.Errorf("refusal = %s: %s; want %s quoting the event and saying %q", r.Reason, r.Message, tc.reason, tc.fix)
			}
		})
	}
}

// lull asks the StatefulSet controller to try again on the blocked
// schedule (5 s, 15 s, 35 s, … after the refusal began), once per retry,
// and for a quota as soon as it has room for what was refused, at most
// every QuotaRetryFloor.
func TestRetryCreateFollowsTheScheduleAndTheQuota(t *testing.T) {
	since := now
	q := func(hard, used string) *corev1.ResourceQuota {
		return &corev1.ResourceQuota{Status: corev1.ResourceQuotaStatus{
			Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse(hard)}, Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse(used)}}}
	}
	_, requested := parseQuota(quotaMessage)
	refused := &Refusal{Reason: lullv1.ReasonPodQuotaExceeded, At: now, Quota: "pods", Requested: requested}
	for _, tc := range []struct {
		name      string
		lastAsked time.Time
		quota     *corev1.ResourceQuota
		at        time.Duration
		want      bool
	}{
		{name: "before the first retry", at: 4 * time.Second},
		{name: "first retry", at: 5 * time.Second, want: true},
		{name: "first retry, asked", lastAsked: now.Add(5 * time.Second), at: 14 * time.Second},
		{name: "second retry", lastAsked: now.Add(5 * time.Second), at: 15 * time.Second, want: true},
		{name: "capped at 5 minutes", lastAsked: now.Add(315 * time.Second), at: 614 * time.Second},
		{name: "capped at 5 minutes, due", lastAsked: now.Add(315 * time.Second), at: 615 * time.Second, want: true},
		{name: "quota still full", quota: q("2", "2"), at: 4 * time.Second},
		{name: "quota raised", quota: q("3", "2"), at: 4 * time.Second, want: true},
		{name: "quota raised, asked 4s ago", quota: q("3", "2"), lastAsked: now.Add(5 * time.Second), at: 9 * time.Second},
		{name: "quota raised, asked 5s ago", quota: q("3", "2"), lastAsked: now.Add(5 * time.Second), at: 10 * time.Second, want: true},
		{name: "quota gone", quota: &corev1.ResourceQuota{}, at: 4 * time.Second, want: true},
	} {
		if got := RetryCreate(refused, since, tc.lastAsked, tc.quota, now.Add(tc.at)); got != tc.want {
			t.Errorf("%s: RetryCreate = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A session whose pod a ResourceQuota refuses is not failing on its
// revision: the brake does not count it, however long it waits.
func TestBrakeSkipsASessionRefusedByAQuota(t *testing.T) {
	old := metav1.NewTime(now.Add(-20 * time.Minute))
	s := lullv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "s"}}
	s.Status.Conditions = []metav1.Condition{
		{Type: lullv1.ConditionReady, Status: metav1.ConditionFalse, Reason: lullv1.ReasonPodQuotaExceeded, LastTransitionTime: old},
		{Type: lullv1.ConditionUpToDate, Status: metav1.ConditionUnknown, Reason: lullv1.ReasonPodQuotaExceeded, LastTransitionTime: old},
	}
	tpl := &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t"}}
	if b := DecideBrake(tpl, "tpl-new", []lullv1.Session{s}, now); b.Paused || len(b.Failing) != 0 {
		t.Errorf("a session refused by a quota trips the brake: paused=%v failing=%v", b.Paused, b.Failing)
	}
	s.Status.Conditions[1].Reason = lullv1.ReasonPodCreateRefused
	if b := DecideBrake(tpl, "tpl-new", []lullv1.Session{s}, now); !b.Paused {
		t.Error("a session whose pod spec admission refuses does not trip the brake: the revision's own refusal must")
	}
}
