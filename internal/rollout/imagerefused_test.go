package rollout

import (
	"testing"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// While the catalog refuses the image the StatefulSet's pod template
// holds, no step starts a replacement of the session's pod (its successor
// would run that image): a drain is not requested, one outstanding is
// withdrawn, a Drained report or a force-update commits nothing. A
// committed replacement is held, its commitment and request kept, not
// finished by a delete; a suspension goes on.
func TestDecideStartsNoReplacementOntoAnImageTheCatalogRefuses(t *testing.T) {
	const refused = `StatefulSet s runs evil.example.com/miner:1: RuntimeCatalog "default" does not list it`
	d := requested(podUID, newRev, 1, now)
	cases := []struct {
		name     string
		setup    func(o *Observed)
		without  Kind // the step when the catalog allows the image
		withheld bool
		held     bool // committed: kept, and not finished
	}{
		{name: "stale pod: no drain requested", setup: func(o *Observed) {}, without: RequestDrain, withheld: true},
		{name: "drain outstanding: withdrawn", setup: func(o *Observed) {
			o.Session.Status.Drain = d
			o.Session.Status.Runtime = report(podUID, d.RequestID, lullv1.RuntimeDraining, 1)
		}, without: Wait, withheld: true},
		{name: "Drained report: not committed", setup: func(o *Observed) {
			o.Session.Status.Drain = d
			o.Session.Status.Runtime = report(podUID, d.RequestID, lullv1.RuntimeDrained, 0)
		}, without: Commit, withheld: true},
		{name: "force-update: not committed", setup: func(o *Observed) {
			o.Session.Annotations = map[string]string{lullv1.AnnotationForceUpdate: "true"}
		}, without: Commit, withheld: true},
		{name: "committed replacement: held, not deleted", setup: func(o *Observed) {
			o.Session.Status.Drain = d
			o.Session.Status.Runtime = report(podUID, d.RequestID, lullv1.RuntimeDrained, 0)
			o.Session.Status.Replacement = committed(podUID, lullv1.ReplacementDrained, d.RequestID)
		}, without: DeletePod, held: true},
		{name: "committed failure: held, not deleted", setup: func(o *Observed) {
			o.Session.Status.Replacement = committed(podUID, lullv1.ReplacementPodFailed, "")
		}, without: DeletePod, held: true},
		{name: "suspended session's committed failure: scaled away, not deleted", setup: func(o *Observed) {
			o.Session.Spec.Suspend = true
			o.Session.Status.Replacement = committed(podUID, lullv1.ReplacementPodFailed, "")
		}, without: Wait},
		{name: "suspension: goes on", setup: func(o *Observed) {
			o.Session.Spec.Suspend = true
		}, without: RequestDrain},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture()
			c.setup(&f.o)
			if a := decide(f.o); a.Kind != c.without {
				t.Fatalf("with the image allowed: %s (%s), want %s: the case proves nothing", a.Kind, a.Message, c.without)
			}
			f.o.ImageRefused = refused
			a := decide(f.o)
			switch {
			case c.held && (a.Kind != Wait || a.Reason != lullv1.ReasonImageNotAllowed || a.Replacement == nil || a.Replacement.PodUID != podUID ||
				(f.o.Session.Status.Drain != nil && (a.Drain == nil || a.Drain.RequestID != f.o.Session.Status.Drain.RequestID))):
				t.Errorf("with the image refused: %s %s, drain %+v, replacement %+v; want Wait %s with the commitment and its request kept",
					a.Kind, a.Reason, a.Drain, a.Replacement, lullv1.ReasonImageNotAllowed)
			case !c.withheld && !c.held && a.Kind != c.without:
				t.Errorf("with the image refused: %s (%s), want %s as when it is allowed", a.Kind, a.Message, c.without)
			case c.withheld && (a.Kind != Wait || a.Reason != lullv1.ReasonImageNotAllowed || a.Drain != nil || a.Replacement != nil):
				t.Errorf("with the image refused: %s %s, drain %+v, replacement %+v; want Wait %s with no drain request and nothing committed",
					a.Kind, a.Reason, a.Drain, a.Replacement, lullv1.ReasonImageNotAllowed)
			}
		})
	}
}
