package rollout

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Guarantee 5 (review of issue 21): a session that is not failing for its
// revision's sake never feeds the brake.
//
// A session already moved to the new revision ran Ready on it for an
// hour; then its node went away. The pod turns NotReady, is evicted and
// stays Terminating (a StatefulSet's pod is never force-deleted), and the
// session says so: Ready False, UpToDate PodStuckTerminating naming the
// node and the manual fix. Once that has lasted the progress deadline
// (10 minutes by default) DecideBrake counts the session as failing on
// the revision and, at the default failureThreshold of 1, pauses the
// template's rollout with FailureThreshold blaming the revision, which
// stays paused after the node is replaced, until someone runs lull rollout
// resume. A lost node is no more the revision's than a full quota, which
// the brake already skips.
func TestBrakeIgnoresASessionNotFailingForItsRevisionNodeGone(t *testing.T) {
	const rev = "new"
	lost := metav1.NewTime(now.Add(-11 * time.Minute))
	s := onRevision("s", rev, metav1.ConditionFalse, "PodNotReady", 11*time.Minute)
	s.Status.PodUID = podUID
	s.Status.Conditions = append(s.Status.Conditions, metav1.Condition{
		Type: lullv1.ConditionUpToDate, Status: metav1.ConditionTrue, Reason: lullv1.ReasonPodStuckTerminating, LastTransitionTime: lost,
		Message: "pod s-0 is still terminating, past its deletion deadline (node gone-node, finalizers []); lull never force-deletes: if node gone-node is gone, delete the Node object"})
	ok := onRevision("ok", rev, metav1.ConditionTrue, "PodReady", time.Hour)
	tpl := &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t"}}
	if b := DecideBrake(tpl, rev, []lullv1.Session{s, ok}, now); b.Paused || len(b.Failing) != 0 {
		t.Fatalf("a session whose node went away pauses the rollout of revision %s: paused=%v failing=%v: %s", rev, b.Paused, b.Failing, b.Message)
	}
}
