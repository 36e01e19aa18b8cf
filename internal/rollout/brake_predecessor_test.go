package rollout

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Guarantee 4 of issue 21: a session not failing for its revision's sake
// never feeds the brake.
//
// The scenario: alice's node goes away. Her pod is evicted and stays
// Terminating (lull never force-deletes, and nobody has deleted the Node
// object yet). Her user, seeing the session stuck, deletes it and creates
// it again under the same name, as `lull` users do. The new Session is
// blocked before anything is rendered (reconcilePredecessor: a
// StatefulSet created now would adopt the predecessor's pod), Ready False
// with reason PredecessorTerminating, and has no pod and no revision of
// its own (status.podUID and status.templateRevision empty), so
// DecideBrake takes it for a session left without a pod by the revision.
// After progressDeadlineSeconds (10 minutes by default) it counts as
// failing, and at the default failureThreshold of 1 the template's
// rollout pauses with FailureThreshold, blaming a revision no pod of it
// ever ran, and stays paused after the node is gone, until someone runs
// `lull rollout resume`. The brake skips a session whose own pod is stuck
// terminating on a lost node (TestBrakeIgnoresASessionNotFailingForItsRevisionNodeGone)
// and one refused by a quota, but not one held back by its predecessor's
// pod, the same lost node's. The same holds for a session blocked by a name
// another owner holds (NameConflict): no revision's doing.
func TestBrakeIgnoresASessionWaitingForItsPredecessorsPodOnALostNode(t *testing.T) {
	const rev = "new"
	for _, tc := range []struct{ reason, msg string }{
		{lullv1.ReasonPredecessorTerminating, "waiting for the objects a Session of this name left to go: Pod alice-0 (terminating, node gone-node)"},
		{lullv1.ReasonNameConflict, "Service alice exists and is not owned by this Session"},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			began := now.Add(-11 * time.Minute)
			s := &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "alice", Namespace: "ns", Generation: 1},
				Spec: lullv1.SessionSpec{TemplateRef: lullv1.TemplateReference{Name: "t"}}}
			st, _ := BlockedStatus(Observed{Now: began, Session: s}, tc.reason, tc.msg)
			s.Status = st
			// Looked at again on the blocked schedule since: the status
			// stays as it was (same reason, same next try computed anew).
			st, _ = BlockedStatus(Observed{Now: now, Session: s}, tc.reason, tc.msg)
			s.Status = st
			ok := onRevision("bob", rev, metav1.ConditionTrue, "PodReady", time.Hour)
			tpl := &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t"}}
			if b := DecideBrake(tpl, rev, []lullv1.Session{*s, ok}, now); b.Paused || len(b.Failing) != 0 {
				t.Fatalf("a session blocked %s for 11 minutes, no pod of revision %s ever made, pauses its rollout: paused=%v failing=%v: %s",
					tc.reason, rev, b.Paused, b.Failing, b.Message)
			}
		})
	}
}
