package rollout

import (
	"testing"
	"time"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Switching a template to Replace while a deadline-less Update drain is
// outstanding must still replace: the request gets the deadline Replace
// gives (now, on the same request ID), instead of waiting for the drain
// forever.
func TestReplaceAfterADrainWithoutDeadline(t *testing.T) {
	f := newFixture()
	f.o.Policy = lullv1.UpdatePolicy{Strategy: lullv1.UpdateStrategyReplace}
	req := requested(podUID, newRev, 1, now.Add(-time.Hour))
	outstanding(&f.o, req)
	f.o.Session.Status.Runtime = report(podUID, req.RequestID, lullv1.RuntimeDraining, 1)
	a := decide(f.o)
	if a.Drain == nil || a.Drain.RequestID != req.RequestID || a.Drain.Deadline == nil || a.Drain.Deadline.After(now) {
		t.Fatalf("strategy Replace, deadline-less drain outstanding for an hour: got %s/%s drain %+v; want the same request with a deadline of now", a.Kind, a.Reason, a.Drain)
	}
	f.o.Session.Status.Drain = a.Drain
	f.o.Now = now.Add(time.Second)
	if a := decide(f.o); a.Kind != Commit || a.Reason != lullv1.ReasonReplaced {
		t.Errorf("once the deadline is written and passed: got %s/%s; want Commit/%s", a.Kind, a.Reason, lullv1.ReasonReplaced)
	}
}
