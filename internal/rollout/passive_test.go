package rollout

import (
	"testing"
	"time"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// A session suspended mid-drain and resumed before its pod went keeps the
// Manual request of its suspension. Under Passive, that must not turn into
// an Update drain (Passive never drains a running stale pod), nor put the
// session in the wave's queue.
func TestPassiveNeverDrainsAResumedSession(t *testing.T) {
	for _, admitted := range []bool{false, true} {
		f := newFixture()
		f.o.Policy = lullv1.UpdatePolicy{Strategy: lullv1.UpdateStrategyPassive}
		f.o.Admitted = admitted
		outstanding(&f.o, manual(podUID, 1, now.Add(-time.Minute)))
		f.o.Session.Status.Runtime = report(podUID, manual(podUID, 1, now.Add(-time.Minute)).RequestID, lullv1.RuntimeDraining, 1)
		a := decide(f.o)
		if a.Kind != Wait || a.Reason != lullv1.ReasonUpdatePending || a.Drain != nil {
			t.Errorf("admitted=%v: Passive, stale pod with a leftover Manual request: got %s/%s drain %+v; want Wait/%s with the request withdrawn",
				admitted, a.Kind, a.Reason, a.Drain, lullv1.ReasonUpdatePending)
		}
	}
}
