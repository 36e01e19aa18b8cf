package rollout

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Guarantee 4 of issue 21, its other half: a session failing for its
// revision's sake feeds the brake. AdmissionUnavailable is exempt as "the
// API server could not call an admission webhook it must call"; the
// API server's "failed calling webhook" says more than that.
//
// The scenario: the cluster runs a mesh's mutating webhook on pods
// (failurePolicy Fail). Revision "new" of the "agent" template adds an
// annotation the injector mishandles: for each pod of that revision, and
// only for those, it answers with a JSON patch that does not decode (or
// an HTTP 500 from a handler that panics, or an AdmissionReview whose uid
// does not match). The API server called it and it answered; the
// API server wraps the answer as ErrCallingWebhook: "Internal error
// occurred: failed calling webhook "inject.mesh.example.com": received
// undecodable patch in webhook response: ...". Pods of the old revision
// are admitted as before. alice, moved to "new" by the wave (her pod
// deleted for the update), has had no pod for 11 minutes, past
// progressDeadlineSeconds.
//
// PodCreateRefusal classifies every "failed calling webhook" as
// AdmissionUnavailable, which the brake exempts: the rollout goes on
// taking away the pod of every session it moves, each onto a revision no
// webhook coming back up admits.
func TestBrakeCountsASessionWhosePodAWebhookAnswersWithAnUndecodablePatch(t *testing.T) {
	const rev = "new"
	began := now.Add(-11 * time.Minute)
	for _, answer := range []string{
		`received undecodable patch in webhook response: invalid character '}' looking for beginning of object key string`,
		`received invalid webhook response: expected response.uid="6d1f", got "0"`,
		`failed to call webhook: an error on the server ("runtime error: invalid memory address or nil pointer dereference") has prevented the request from succeeding`,
	} {
		msg := `create Pod alice-0 in StatefulSet alice failed error: Internal error occurred: failed calling webhook "inject.mesh.example.com": ` + answer
		var reason string
		s := refusedSince(t, began, msg, nil, func(r *Refusal) {
			if r == nil {
				t.Fatal("setup: no refusal")
			}
			reason = r.Reason
		})
		bob := onRevision("bob", "old", metav1.ConditionTrue, lullv1.ReasonPodReady, time.Hour) // waits to move to "new"
		tpl := &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}
		if b := DecideBrake(tpl, rev, []lullv1.Session{*s, bob}, now); !b.Paused {
			t.Errorf("a session whose pod of revision %s a webhook answered but could not admit for 11 minutes (%s; classified %s) does not pause the rollout: failing=%v: %s",
				rev, answer, reason, b.Failing, b.Message)
		}
	}
}
