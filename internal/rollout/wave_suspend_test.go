package rollout

import (
	"testing"
	"time"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// A resumed session whose Manual (suspension) request is still outstanding
// and which has no place in the wave must not stay drained (its runtime
// refusing every turn) while it waits for one: that request answers a
// suspension that no longer is, and the session is not counted in the
// wave.
func TestWaitingForWaveDoesNotKeepASuspensionDrain(t *testing.T) {
	f := newFixture()
	f.o.Admitted = false
	outstanding(&f.o, manual(podUID, 1, now.Add(-time.Minute)))
	f.o.Session.Status.Runtime = report(podUID, manual(podUID, 1, now.Add(-time.Minute)).RequestID, lullv1.RuntimeDrained, 0)
	a := decide(f.o)
	if a.Reason != lullv1.ReasonWaitingForWave || a.Drain != nil {
		t.Errorf("got %s/%s drain %+v; want WaitingForWave with the Manual request withdrawn", a.Kind, a.Reason, a.Drain)
	}
}
