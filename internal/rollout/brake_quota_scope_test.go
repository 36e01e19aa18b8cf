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

// Guarantee 4 of issue 21, its other side: a session failing for its
// revision's sake feeds the brake. overLimit sets object counts aside ("a
// quota of 0 pods or claims is the namespace's policy, which every
// revision meets alike"), but a scoped quota's count is met only by the
// pods in its scope, and a revision picks the scope.
//
// The scenario: the namespace forbids the "high" priority class with a
// ResourceQuota "no-high" (scopeSelector PriorityClass In [high], hard
// pods: 0), as the ResourceQuota documentation suggests for limiting a
// priority class to some namespaces. Revision "old" of the "agent"
// template sets no priority class; revision "new" sets
// priorityClassName: high. The rollout drains alice and deletes her pod;
// the StatefulSet controller's create of her pod of "new" is refused:
// "exceeded quota: no-high, requested: pods=1, used: pods=0, limited:
// pods=0". No capacity freed admits it (the quota allows none in all);
// only a revision without that priority class is admitted. alice has no
// pod, Ready False and UpToDate Unknown PodQuotaExceeded, for 11 minutes,
// past progressDeadlineSeconds.
//
// PodCreateRefusal called it PodQuotaExceeded (pods is a count), which
// the brake exempts: every session the wave admits next lost a working
// pod of "old" for one that is never created. The quota's scope, read
// with the namespace's quotas, makes it the revision's: PodCreateRefused.
func TestBrakeCountsASessionWhosePodTheRevisionPutsInAScopeItsQuotaClosed(t *testing.T) {
	const rev = "new"
	began := now.Add(-11 * time.Minute)
	const refused = `create Pod alice-0 in StatefulSet alice failed error: pods "alice-0" is forbidden: exceeded quota: no-high, requested: pods=1, used: pods=0, limited: pods=0`
	wasReady := []metav1.Condition{{Type: lullv1.ConditionReady, Status: metav1.ConditionTrue, Reason: lullv1.ReasonPodReady,
		LastTransitionTime: metav1.NewTime(began.Add(-time.Hour))}}
	var reason string
	s := refusedSinceAmong(t, began, refused, wasReady, []corev1.ResourceQuota{noHigh()}, func(r *Refusal) {
		if r == nil {
			t.Fatal("setup: no refusal")
		}
		reason = r.Reason
	})
	bob := onRevision("bob", "old", metav1.ConditionTrue, lullv1.ReasonPodReady, time.Hour) // next in the wave
	tpl := &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}
	if b := DecideBrake(tpl, rev, []lullv1.Session{*s, bob}, now); !b.Paused {
		t.Errorf("a session whose pod of revision %s is refused by a scoped quota of 0 pods for 11 minutes (classified %s) does not trip the brake: failing=%v: %s",
			rev, reason, b.Failing, b.Message)
	}
}

// noHigh is the ResourceQuota that closes the "high" priority class:
// scopeSelector PriorityClass In [high], hard pods: 0.
func noHigh() corev1.ResourceQuota {
	return corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "no-high"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")},
			ScopeSelector: &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{
				ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn, Values: []string{"high"}}}}}}
}

// A quota named by a refusal and scoped by spec.scopes (here
// BestEffort: the template's pod asks no resources) is as much the
// revision's as one scoped by a selector; the message names the scope
// and the fix is the template's.
func TestAQuotaScopedByScopesRefusesForTheRevision(t *testing.T) {
	q := corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "no-besteffort"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")},
			Scopes: []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeBestEffort}}}
	msg := `create Pod alice-0 in StatefulSet alice failed error: pods "alice-0" is forbidden: exceeded quota: no-besteffort, requested: pods=1, used: pods=0, limited: pods=0`
	refusedSinceAmong(t, now.Add(-time.Minute), msg, nil, []corev1.ResourceQuota{q}, func(r *Refusal) {
		if r == nil || r.Reason != lullv1.ReasonPodCreateRefused || !strings.Contains(r.Message, "BestEffort") || !strings.Contains(r.Message, "SessionTemplate agent") {
			t.Fatalf("a scoped quota's refusal: %+v", r)
		}
	})
}

// A quota lull cannot read (gone, not cached, not allowed) is taken as
// unscoped, the namespace's policy, as before scopes were told apart; the
// message says it was not read.
func TestAQuotaNotReadIsTakenAsUnscopedAndSaysSo(t *testing.T) {
	msg := `create Pod alice-0 in StatefulSet alice failed error: pods "alice-0" is forbidden: exceeded quota: no-high, requested: pods=1, used: pods=0, limited: pods=0`
	refusedSinceAmong(t, now.Add(-time.Minute), msg, nil, nil, func(r *Refusal) {
		if r == nil || r.Reason != lullv1.ReasonPodQuotaExceeded || !strings.Contains(r.Message, "could not be read: taken as unscoped") {
			t.Fatalf("a refusal by a quota not read: %+v", r)
		}
	})
}

// An unscoped quota of 0 pods among the namespace's quotas stays the
// namespace's policy, whatever other quota is scoped.
func TestAnUnscopedQuotaAmongScopedOnesStaysTheNamespaces(t *testing.T) {
	closed := corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "closed"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}}
	msg := `create Pod alice-0 in StatefulSet alice failed error: pods "alice-0" is forbidden: exceeded quota: closed, requested: pods=1, used: pods=0, limited: pods=0`
	refusedSinceAmong(t, now.Add(-time.Minute), msg, nil, []corev1.ResourceQuota{noHigh(), closed}, func(r *Refusal) {
		if r == nil || r.Reason != lullv1.ReasonPodQuotaExceeded || strings.Contains(r.Message, "could not be read") {
			t.Fatalf("an unscoped quota's refusal: %+v", r)
		}
	})
}
