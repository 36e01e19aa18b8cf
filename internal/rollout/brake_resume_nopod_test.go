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
// The scenario: alice's session was suspended an hour ago; its pod is
// gone, its status Ready False Suspended since then, no pod named. Her
// user resumes it now. The StatefulSet is scaled back to one replica but
// its controller has not created the pod yet when the settle delay runs
// out (a busy or restarting kube-controller-manager, a few seconds), so
// the session controller writes the no-pod state: Ready False PodPending,
// UpToDate PodPending. Ready's status did not change (False to False), so
// its lastTransitionTime stays at the suspension, an hour ago; the reset
// of the progress deadline (NextStatus) happens only once a new pod is
// seen. DecideBrake then counts a running session with no pod, Ready
// False for an hour past progressDeadlineSeconds, as failing: at the
// default failureThreshold of 1 the rollout pauses (status.pausedRevision)
// and stays paused after the pod comes up a second later. No revision
// made the wait: the session has been without a pod for a second.
func TestBrakeIgnoresAResumedSessionWhosePodIsNotCreatedYet(t *testing.T) {
	f := newFixture()
	s := f.o.Session
	s.Spec.Suspend = true
	f.o.Now, f.o.Pod = now.Add(-time.Hour), nil // suspended an hour ago, its pod gone
	s.Status = nextStatus(f.o, decide(f.o))
	s.Spec.Suspend = false // resumed now
	f.o.Now = now
	a := decide(f.o)
	s.Status = nextStatus(f.o, a) // written once the settle delay ran out, the pod not created yet
	if s.Status.PodUID != "" || s.Status.TemplateRevision != "" {
		t.Fatalf("setup: a resumed session without a pod names pod %q, revision %q", s.Status.PodUID, s.Status.TemplateRevision)
	}

	tpl := &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t"}}
	b := DecideBrake(tpl, "tpl-new", []lullv1.Session{*s}, now.Add(time.Second))
	if b.Paused || len(b.Failing) != 0 {
		t.Fatalf("a session resumed a second ago (action %s %s), its pod not created yet, pauses the rollout: paused=%v failing=%v: %s",
			a.Kind, a.Reason, b.Paused, b.Failing, b.Message)
	}
}

// Guarantee 4 of issue 21, the same gap reached from a lost node.
//
// The scenario: the session's pod s-0 (UID podUID, template revision
// tpl-new) went NotReady 15 minutes ago when its node was lost; it was
// evicted and stayed Terminating (UpToDate PodStuckTerminating, which the
// brake skips). The Node object is deleted now, the pod goes with it, and
// the StatefulSet controller has not created its successor when the
// settle delay runs out. The session controller writes the no-pod state:
// Ready False PodPending, its lastTransitionTime still the node's loss 15
// minutes ago (False to False), no pod named. The brake counts it as
// failing on the revision at once and pauses the rollout, though the pod
// that replaces it has not even been created: "the pod that replaces it is
// judged on its own" (notTheRevisions) does not hold between the two pods.
func TestBrakeIgnoresASessionBetweenALostNodesPodAndItsSuccessor(t *testing.T) {
	f := newFixture()
	s := f.o.Session
	lost := metav1.NewTime(now.Add(-15 * time.Minute))
	s.Status.PodName, s.Status.PodUID, s.Status.TemplateRevision = "s-0", podUID, "tpl-new"
	s.Status.Conditions = []metav1.Condition{
		{Type: lullv1.ConditionReady, Status: metav1.ConditionFalse, Reason: lullv1.ReasonPodNotReady, LastTransitionTime: lost},
		{Type: lullv1.ConditionUpToDate, Status: metav1.ConditionTrue, Reason: lullv1.ReasonPodStuckTerminating, LastTransitionTime: lost},
	}
	f.o.Pod = nil // gone with its Node; the successor not created yet
	a := decide(f.o)
	s.Status = nextStatus(f.o, a)

	tpl := &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t"}}
	b := DecideBrake(tpl, "tpl-new", []lullv1.Session{*s}, now.Add(time.Second))
	if b.Paused || len(b.Failing) != 0 {
		t.Fatalf("a session whose lost node's pod went a second ago (action %s %s) pauses the rollout: paused=%v failing=%v: %s",
			a.Kind, a.Reason, b.Paused, b.Failing, b.Message)
	}
}
