package rollout

import (
	"testing"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// A node drain's request always carries its deadline, and Decide never
// fails on a request as status holds it. A second writer of status (a
// user with `kubectl edit --subresource=status`, a restore from a backup
// that dropped the field) leaves the NodeDrain request marked with the
// node but without its deadline. decideNodeDrain's wait computes its
// requeue from cur.Deadline unconditionally (the deadline is only added
// to a request not yet marked with the node), so Decide panics on a nil
// *metav1.Time and the session's reconciler crashes on every pass.
func TestNodeDrainWithoutADeadlineIsWaitedOnNotAPanic(t *testing.T) {
	f := onNode()
	d := nodeDrain(1, now)
	d.Deadline = nil
	f.o.Session.Status.DrainSequence = 1
	f.o.Session.Status.Drain = d
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("Decide panicked on a NodeDrain request without a deadline: %v", r)
		}
	}()
	a := decide(f.o)
	if a.Kind != Wait || a.Drain == nil || a.Drain.Reason != lullv1.DrainReasonNodeDrain {
		t.Errorf("action %+v; want the node drain waited on", a)
	}
}
