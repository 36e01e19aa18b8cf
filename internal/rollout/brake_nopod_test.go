package rollout

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// A revision whose pods the API server refuses (a PodSecurity level, a
// quota, a webhook) leaves each session it reaches with no pod at all: the
// old pod was drained and deleted, the StatefulSet cannot create the new
// one. Such a session has failed on the update revision as surely as one
// crash-looping, yet its status names no template revision, so the brake
// never counts it and never pauses the rollout.
func TestBrakeCountsASessionWhoseNewPodIsNeverCreated(t *testing.T) {
	f := newFixture()
	f.o.StatefulSet.Spec.Template.Labels = map[string]string{lullv1.LabelTemplateRevision: "tpl-new"}
	f.o.Pod = nil
	f.o.Session.Status.Conditions = []metav1.Condition{{Type: lullv1.ConditionReady, Status: metav1.ConditionFalse, Reason: lullv1.ReasonPodPending,
		LastTransitionTime: metav1.NewTime(now.Add(-20 * time.Minute))}}
	st := nextStatus(f.o, decide(f.o))
	s := *f.o.Session
	s.Status = st
	tpl := &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t"}}
	if b := DecideBrake(tpl, "tpl-new", []lullv1.Session{s}, now); !b.Paused || len(b.Failing) != 1 {
		t.Errorf("a session without a pod for 20 min on the update revision's StatefulSet does not trip the brake: paused=%v failing=%v (%s)", b.Paused, b.Failing, b.Message)
	}
}

// A new session waiting for its template's files ConfigMap (a full quota)
// has no pod either, but nothing was taken from it, and the template says
// why: the brake must not pause the revision, which would outlast the
// quota being raised.
func TestBrakeSkipsASessionWaitingForFiles(t *testing.T) {
	old := metav1.NewTime(now.Add(-20 * time.Minute))
	s := lullv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "s"}}
	s.Status.Conditions = []metav1.Condition{
		{Type: lullv1.ConditionReady, Status: metav1.ConditionFalse, Reason: lullv1.ReasonPodPending, LastTransitionTime: old},
		{Type: lullv1.ConditionUpToDate, Status: metav1.ConditionUnknown, Reason: lullv1.ReasonFilesNotReady, LastTransitionTime: old},
	}
	tpl := &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t"}}
	if b := DecideBrake(tpl, "tpl-new", []lullv1.Session{s}, now); b.Paused || len(b.Failing) != 0 {
		t.Errorf("a session waiting for files trips the brake: paused=%v failing=%v", b.Paused, b.Failing)
	}
	s.Status.Conditions[1].Reason = lullv1.ReasonPodPending
	if b := DecideBrake(tpl, "tpl-new", []lullv1.Session{s}, now); !b.Paused {
		t.Error("the same session without FilesNotReady does not trip the brake: the test proves nothing")
	}
}
