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
// The scenario: alice's session was suspended an hour ago (idle cull or
// by hand); its pod is gone, so its status says Ready False Suspended
// since then, with no pod (status.podUID and templateRevision empty).
// Her user resumes it now. The resume is a spec change, which the
// template controller's Session watch passes at once (TemplateInputsChanged),
// so the template's status is computed on the Session as it is at that
// moment: spec.suspend false, the status still the suspended one. The
// session controller writes nothing yet: the StatefulSet scales up and
// its pod is created and starts, all passing states (PodPending, a pod
// not yet running) whose write settles for SettleDelay. DecideBrake
// counts a running session with no pod and Ready False for an hour as
// failing, past progressDeadlineSeconds: at the default failureThreshold
// of 1 the rollout pauses with FailureThreshold and stays paused
// (status.pausedRevision) after the pod comes up Ready a few seconds
// later, until someone runs `lull rollout resume`. Every resume during a
// rollout stops it. TestBrakeIgnoresAResumedSessionStarting covers the
// status once the session controller has written the new pod, not the
// moment before.
func TestBrakeIgnoresASessionResumedBeforeItsStatusIsWritten(t *testing.T) {
	f := newFixture()
	s := f.o.Session
	s.Spec.Suspend = true
	f.o.Now, f.o.Pod = now.Add(-time.Hour), nil // suspended an hour ago, its pod gone
	s.Status = nextStatus(f.o, decide(f.o))
	if s.Status.PodUID != "" || s.Status.TemplateRevision != "" {
		t.Fatalf("setup: a suspended session's status names pod %q, revision %q", s.Status.PodUID, s.Status.TemplateRevision)
	}
	s.Spec.Suspend = false // resumed now; its status not yet written again

	tpl := &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t"}}
	b := DecideBrake(tpl, "tpl-new", []lullv1.Session{*s}, now.Add(time.Second))
	if b.Paused || len(b.Failing) != 0 {
		t.Fatalf("a session resumed a second ago, its status still the suspended one, pauses the rollout: paused=%v failing=%v: %s",
			b.Paused, b.Failing, b.Message)
	}
}
