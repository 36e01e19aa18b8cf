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
// The scenario: a platform team replaces the "agent" SessionTemplate by
// deleting it and applying a new version (a GitOps tool's replace, a
// chart's delete and install, or a sync that orders Sessions before
// templates). During the gap bob creates a new Session of it; it is
// blocked before anything is rendered, Ready False TemplateNotFound, with
// no pod of any revision (status.podUID and templateRevision empty). The
// gap lasts past progressDeadlineSeconds (10 minutes by default). The new
// template arrives with revision "new"; its controller computes the brake
// at once, on the Session as it is (its session controller's next write
// is yet to come, and the pod it starts is a passing state for
// SettleDelay), and counts bob as a session the revision left without a
// pod: the rollout of "new" to every session still on the old revision
// pauses with FailureThreshold, and stays paused after bob's pod is
// Ready, until someone runs `lull rollout resume`. No pod of "new" was
// ever made for bob, as for PredecessorTerminating and NameConflict.
func TestBrakeIgnoresASessionThatWaitedForItsTemplate(t *testing.T) {
	const rev = "new"
	began := now.Add(-11 * time.Minute)
	s := &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "bob", Namespace: "ns", Generation: 1},
		Spec: lullv1.SessionSpec{TemplateRef: lullv1.TemplateReference{Name: "agent"}}}
	msg := `SessionTemplate "agent" not found in namespace ns; create it or fix spec.templateRef.name`
	st, _ := BlockedStatus(Observed{Now: began, Session: s}, lullv1.ReasonTemplateNotFound, msg)
	s.Status = st
	st, _ = BlockedStatus(Observed{Now: now.Add(-time.Second), Session: s}, lullv1.ReasonTemplateNotFound, msg)
	s.Status = st
	alice := onRevision("alice", "old", metav1.ConditionTrue, "PodReady", time.Hour) // waits to move to "new"
	tpl := &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}
	if b := DecideBrake(tpl, rev, []lullv1.Session{*s, alice}, now); b.Paused || len(b.Failing) != 0 {
		t.Fatalf("a session that waited 11 minutes for its template, no pod of revision %s ever made, pauses the template's rollout: paused=%v failing=%v: %s",
			rev, b.Paused, b.Failing, b.Message)
	}
}
