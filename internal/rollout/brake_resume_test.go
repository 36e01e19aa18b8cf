package rollout

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// A session suspended for an hour and resumed onto the update revision
// starts a new pod; that pod must get progressDeadlineSeconds to become
// Ready. Its Ready condition has been False (Suspended) for an hour, so the
// brake, counting from it, judges the healthy new pod failing at once and
// pauses the rollout for everyone.
func TestBrakeIgnoresAResumedSessionStarting(t *testing.T) {
	f := newFixture()
	f.o.Session.Status.Conditions = []metav1.Condition{{Type: lullv1.ConditionReady, Status: metav1.ConditionFalse, Reason: lullv1.ReasonSuspended,
		LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))}}
	// Resumed: the StatefulSet scaled back up and made a pod of the update
	// revision, which is starting.
	f.o.Pod = &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "s-0", UID: types.UID("pod-2"), Labels: map[string]string{
			appsv1.ControllerRevisionHashLabelKey: newRev, lullv1.LabelTemplateRevision: "tpl-new"}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	f.o.Session.Status.Runtime = nil
	st := nextStatus(f.o, decide(f.o))
	s := *f.o.Session
	s.Status = st
	tpl := &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t"}}
	b := DecideBrake(tpl, "tpl-new", []lullv1.Session{s}, now.Add(time.Second))
	if b.Paused || len(b.Failing) > 0 {
		t.Errorf("a session resumed a second ago, its new pod starting, trips the brake: %s (failing %v)", b.Message, b.Failing)
	}
}
