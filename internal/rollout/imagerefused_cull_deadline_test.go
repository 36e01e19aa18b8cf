package rollout

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Guarantee 5 of issue 21: while the catalog refuses the StatefulSet's
// image, no replacement onto it is started, and an idle cull goes on.
//
// The scenario: a template moved its sessions from :1 to :2 while the
// catalog listed :2, and lull wrote :2 into alice's StatefulSet; her pod
// still runs :1 (stale). Then the catalog drops :2. The gate holds
// nothing (the StatefulSet "already carries" the template's image), so
// o.ImageRefused is set and the pod is stale. Her session has been idle
// past suspendAfter, and the template's update has a deadline (the
// Replace strategy, or drainTimeout with onDrainTimeout Replace, as a
// break-glass makes it), and the wave has a place for her.
//
// decideLifecycle lets the update, which has a deadline, take over from
// the idle cull ("the update goes first"); rule 9 then withholds that
// update's drain request. Nothing is left: the idle drain is never
// requested, an outstanding one is withdrawn (a runtime that already
// answered it Drained reopens), and the session runs on forever, never
// culled, for as long as the catalog refuses the image. The idle cull
// starts no pod and is exempt from rule 9, but the take-over is decided
// before rule 9 runs, so the exemption never sees an idle step.
func TestAnIdleCullGoesOnWhileTheCatalogWithholdsAnUpdateWithADeadline(t *testing.T) {
	const refused = `StatefulSet s runs example.com/agent:2: RuntimeCatalog "default" does not list it`
	policies := map[string]lullv1.UpdatePolicy{
		"Replace":                {Strategy: lullv1.UpdateStrategyReplace},
		"onDrainTimeout Replace": staleIdleDrainFixture().o.Policy,
	}
	for name, p := range policies {
		t.Run(name+": no drain yet", func(t *testing.T) {
			f := idleFixture()
			f.o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = oldRev // stale
			f.o.Policy, f.o.Admitted = p, true
			f.o.ImageRefused = refused
			a := decide(f.o)
			if a.Kind != RequestDrain || a.Drain == nil || a.Drain.Reason != lullv1.DrainReasonIdle {
				t.Fatalf("idle past suspendAfter, stale, update withheld by the catalog: %s %s drain %+v (%s); want the Idle drain requested: "+
					"the cull goes on while the catalog refuses the image", a.Kind, a.Reason, a.Drain, a.Message)
			}
		})
		t.Run(name+": idle drain answered Drained", func(t *testing.T) {
			f := idleFixture()
			f.o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = oldRev // stale
			f.o.Policy, f.o.Admitted = p, true
			req := idleRequest(podUID, 1)
			outstanding(&f.o, req)
			f.o.Session.Status.Runtime.State, f.o.Session.Status.Runtime.RequestID = lullv1.RuntimeDrained, req.RequestID
			f.o.ImageRefused = refused
			a := decide(f.o)
			if !CommitsCull(a) {
				t.Fatalf("runtime Drained for its idle request, stale, update withheld by the catalog: %s %s drain %+v (%s); want the cull committed, "+
					"not the drained runtime reopened", a.Kind, a.Reason, a.Drain, a.Message)
			}
		})
	}
}
