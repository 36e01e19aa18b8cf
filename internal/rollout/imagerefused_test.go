package rollout

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

// A replacement committed while an idle drain is outstanding is still a
// replacement: a stale pod that has failed, or one forced with
// lull.dev/force-update, is deleted once committed, and the StatefulSet
// creates its successor on the refused image. Only the cull itself (the
// idle drain answered Drained) creates no pod, and only it goes on. (Found
// by the sixth review: the idle exemption was judged on the drain request
// alone, not on what the step commits.)
func TestDecideCommitsNoReplacementOntoARefusedImageUnderAnIdleDrain(t *testing.T) {
	const refused = `StatefulSet s runs evil.example.com/miner:1: RuntimeCatalog "default" does not list it`
	cases := []struct {
		name string
		edit func(o *Observed)
	}{
		{name: "failed pod", edit: func(o *Observed) {
			// Its runtime last reported before the container last terminated.
			cs := waiting("CrashLoopBackOff")
			cs.RestartCount = 3
			cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, FinishedAt: metav1.NewTime(now)}
			o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
		}},
		{name: "force-update", edit: func(o *Observed) {
			o.Session.Annotations = map[string]string{lullv1.AnnotationForceUpdate: "true"}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := idleFixture()
			f.o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = oldRev // stale
			outstanding(&f.o, idleRequest(podUID, 1))
			c.edit(&f.o)
			if a := decide(f.o); a.Kind != Commit || CommitsCull(a) {
				t.Fatalf("with the image allowed: %s %s (cull %v), want the Commit of a replacement: the case proves nothing", a.Kind, a.Reason, CommitsCull(a))
			}
			f.o.ImageRefused = refused
			if a := decide(f.o); a.Kind != Wait || a.Reason != lullv1.ReasonImageNotAllowed || a.Replacement != nil {
				t.Errorf("with the image refused: %s %s, replacement %+v; want Wait %s with nothing committed", a.Kind, a.Reason, a.Replacement, lullv1.ReasonImageNotAllowed)
			}
		})
	}
}

// The cull itself goes on while the image is refused: the Idle drain is
// requested and, once the runtime answers Drained, committed, as it
// suspends the session and creates no pod.
func TestDecideLetsAnIdleCullGoOnWhileTheImageIsRefused(t *testing.T) {
	for _, stale := range []bool{false, true} {
		f := idleFixture()
		if stale {
			f.o.Policy.Strategy = lullv1.UpdateStrategyPassive // the pod is left alone but for its cull
			f.o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = oldRev
		}
		f.o.ImageRefused = `StatefulSet s runs evil.example.com/miner:1: RuntimeCatalog "default" does not list it`
		if a := decide(f.o); a.Kind != RequestDrain || a.Drain == nil || a.Drain.Reason != lullv1.DrainReasonIdle {
			t.Fatalf("stale %v: idle past suspendAfter, image refused: %s %s; want the Idle drain requested", stale, a.Kind, a.Reason)
		}
		req := idleRequest(podUID, 1)
		outstanding(&f.o, req)
		f.o.Session.Status.Runtime.State, f.o.Session.Status.Runtime.RequestID = lullv1.RuntimeDrained, req.RequestID
		a := decide(f.o)
		if !CommitsCull(a) {
			t.Fatalf("stale %v: runtime Drained for the idle request, image refused: %s %s; want the cull committed", stale, a.Kind, a.Reason)
		}
		f.o.Session.Status.Replacement = a.Replacement
		if a := decide(f.o); a.Kind != SuspendSession {
			t.Errorf("stale %v: cull committed, image refused: %s %s; want SuspendSession", stale, a.Kind, a.Reason)
		}
	}
}
