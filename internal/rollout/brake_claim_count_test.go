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
// The scenario: the namespace's admin closes it to new claims with a
// ResourceQuota "claims" that allows no PersistentVolumeClaim
// (persistentvolumeclaims: 0, or 0 of a storage class:
// standard.storageclass.storage.k8s.io/persistentvolumeclaims: 0), as one
// closes a namespace to new pods with pods: 0. carol, a new session of
// the "agent" template, whose pod has a workspace claim, never gets her
// pod: the StatefulSet controller's create of her claim is refused,
// "exceeded quota: claims, requested: persistentvolumeclaims=1,
// used: persistentvolumeclaims=0, limited: persistentvolumeclaims=0".
// Any revision of the template, the old one as the new, meets that quota
// alike: it is the namespace's policy, not something a revision asks too
// much of.
//
// overLimit sets aside only the object counts named pods and count/*: it
// takes the claim count persistentvolumeclaims=1 over its limit 0 for a
// resource the pod alone asks too much of, so the refusal is
// PodCreateRefused, the revision's. carol has no pod (noPod), so after
// progressDeadlineSeconds the brake counts her as failing on the update
// revision and pauses the rollout (failureThreshold 1), holding back a
// revision that has nothing to do with the refusal. The same quota
// written as count/persistentvolumeclaims is set aside, as it should be.
func TestBrakeIgnoresASessionWhoseClaimAQuotaOfNoClaimsRefuses(t *testing.T) {
	const rev = "new"
	began := now.Add(-11 * time.Minute)
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "carol", UID: "sts-carol"},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1)}}
	tpl := &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}
	bob := onRevision("bob", "old", metav1.ConditionTrue, lullv1.ReasonPodReady, time.Hour) // next in the wave

	refusedBy := func(count string) (*Refusal, lullv1.Session) {
		msg := `create Claim workspace-agent-carol-0 for Pod carol-0 in StatefulSet carol failed error: persistentvolumeclaims "workspace-agent-carol-0" is forbidden: ` +
			`exceeded quota: claims, requested: ` + count + `=1,requests.storage=1Gi, used: ` + count + `=0,requests.storage=0, limited: ` + count + `=0,requests.storage=100Gi`
		ev := corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "carol.1", CreationTimestamp: metav1.NewTime(began)},
			InvolvedObject: corev1.ObjectReference{Kind: "StatefulSet", Namespace: "ns", Name: "carol", UID: "sts-carol"}, Reason: "FailedCreate",
			Message: msg, LastTimestamp: metav1.NewTime(began)}
		s := &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "carol", Namespace: "ns", Generation: 1},
			Spec: lullv1.SessionSpec{TemplateRef: lullv1.TemplateReference{Name: "agent"}}}
		var r *Refusal
		for _, at := range []time.Time{began, now.Add(-time.Second)} {
			ev.LastTimestamp = metav1.NewTime(at)
			o := Observed{Now: at, Session: s, StatefulSet: sts}
			if r = PodCreateRefusal(o, []corev1.Event{ev}, "agent"); r == nil {
				t.Fatalf("setup: the refused create of carol's claim (%s) is not seen", count)
			}
			s.Status, _ = BlockedStatus(o, r.Reason, r.Message)
		}
		return r, *s
	}

	if r, s := refusedBy("count/persistentvolumeclaims"); r.Reason != lullv1.ReasonPodQuotaExceeded {
		t.Fatalf("setup: a quota of count/persistentvolumeclaims=0 is refusal %s, want %s", r.Reason, lullv1.ReasonPodQuotaExceeded)
	} else if b := DecideBrake(tpl, rev, []lullv1.Session{s, bob}, now); b.Paused {
		t.Fatalf("setup: a quota of count/persistentvolumeclaims=0 trips the brake: the test proves nothing")
	}
	for _, count := range []string{"persistentvolumeclaims", "standard.storageclass.storage.k8s.io/persistentvolumeclaims"} {
		r, s := refusedBy(count)
		if b := DecideBrake(tpl, rev, []lullv1.Session{s, bob}, now); b.Paused {
			t.Errorf("a quota of %s=0, the namespace closed to new claims, refused carol's claim (refusal %s: %s); "+
				"the brake counts her as failing on revision %s and pauses the rollout: %s", count, r.Reason, r.Message, rev, b.Message)
		}
	}
}
