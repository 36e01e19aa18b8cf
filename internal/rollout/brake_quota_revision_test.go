package rollout

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Guarantee 4 of issue 21, its other side: a session failing for its
// revision's sake feeds the brake; an exemption too wide is a break too
// (a revision whose pods are refused must still trip the brake).
//
// The scenario: the namespace has a ResourceQuota "mem" with
// requests.memory=32Gi. Sessions of the "agent" template ran revision
// "old", each pod requesting 2Gi. Revision "new" asks 64Gi for the
// runtime container (a typo: 64Gi for 6Gi). The rollout drains alice and
// deletes her pod; the StatefulSet controller's create of her new pod is
// refused: "exceeded quota: mem, requested: requests.memory=64Gi, used:
// requests.memory=30Gi, limited: requests.memory=32Gi". The pod alone
// asks twice what the quota allows in all: no capacity the namespace
// could free makes room for it, and only a new revision can. alice has
// no pod (status.podUID and templateRevision empty), Ready False and
// UpToDate Unknown PodQuotaExceeded, for 11 minutes, past
// progressDeadlineSeconds.
//
// DecideBrake skips every session whose UpToDate reason is
// PodQuotaExceeded ("the namespace's capacity, which any revision meets
// alike"), so revision "new" never trips the brake: the template says
// Progressing, and every session the wave admits next loses a working pod
// of "old" for one that is never created. The refusal is of the
// revision's pod, by the revision's own request, as a PodSecurity
// level's or a webhook's is (TestBrakeCountsASessionWhoseNewPodIsNeverCreated
// lists a quota among the refusals a revision makes).
func TestBrakeCountsASessionWhosePodTheRevisionMakesTooLargeForItsQuota(t *testing.T) {
	const rev = "new"
	began := now.Add(-11 * time.Minute)
	const quota = `create Pod alice-0 in StatefulSet alice failed error: pods "alice-0" is forbidden: exceeded quota: mem, requested: requests.memory=64Gi, used: requests.memory=30Gi, limited: requests.memory=32Gi`
	// Her pod of "old" was Ready until the rollout replaced it, a moment
	// before the refused create.
	wasReady := []metav1.Condition{{Type: lullv1.ConditionReady, Status: metav1.ConditionTrue, Reason: lullv1.ReasonPodReady,
		LastTransitionTime: metav1.NewTime(began.Add(-time.Hour))}}
	s := refusedSince(t, began, quota, wasReady, func(r *Refusal) {
		if r == nil || r.Reason != lullv1.ReasonPodCreateRefused || !strings.Contains(r.Message, "the pod alone asks more requests.memory than ResourceQuota mem allows") {
			t.Fatalf("refusal %+v, want reason %s saying the pod alone asks more than the quota allows: no capacity freed admits it", r, lullv1.ReasonPodCreateRefused)
		}
	})
	bob := onRevision("bob", "old", metav1.ConditionTrue, lullv1.ReasonPodReady, time.Hour) // next in the wave
	tpl := &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}
	webhook := s.DeepCopy() // the same refusal, by a webhook instead of a quota
	for i := range webhook.Status.Conditions {
		webhook.Status.Conditions[i].Reason = lullv1.ReasonPodCreateRefused
	}
	if b := DecideBrake(tpl, rev, []lullv1.Session{*webhook, bob}, now); !b.Paused {
		t.Fatalf("setup: the same session refused by a webhook does not trip the brake either: the test proves nothing")
	}
	if b := DecideBrake(tpl, rev, []lullv1.Session{*s, bob}, now); !b.Paused || len(b.Failing) != 1 {
		t.Fatalf("a session whose pod of revision %s asks 64Gi of a 32Gi quota, refused for 11 minutes, does not trip the brake: paused=%v failing=%v: %s",
			rev, b.Paused, b.Failing, b.Message)
	}
}
