package session

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/rollout"
)

// Issue 21, review round 2: does the restore backoff ever block a
// drain-safety step? It did. While a restore of a StatefulSet another
// writer keeps changing back waits (5 s, doubling to 5 minutes), the
// reconcile returned before the rollout decided: no step was taken, also
// none that touches only the Session's status and nothing of the
// StatefulSet's spec. An Update drain request that must be withdrawn (here
// the template's strategy changed to Passive, which withdraws it so that
// the runtime reopens; the same holds for an idle cull whose user came
// back, or a template rolled back) stayed outstanding until lull's next
// restore: the runtime kept refusing its user's new turns ("draining,
// retry after reconnect") for up to 5 minutes at each step of the fight,
// for a StatefulSet field the withdrawal does not depend on.
//
// Now, while the restore waits, only the steps that act on the
// StatefulSet's spec or its pod wait (heldForRestore).
func TestRestoreBackoffDoesNotHoldADrainRequestThatMustBeWithdrawn(t *testing.T) {
	w, _ := driftWorld(t)
	if w.session().Status.Drain == nil {
		t.Fatal("precondition: the stale pod's drain is requested")
	}
	// A writer that changes the StatefulSet back after each restore:
	// five restores in a row, each as soon as its backoff allows.
	for i := 0; i < 5; i++ {
		w.handEdit(privileged)
		res, err := w.reconcile()
		if err != nil {
			t.Fatal(err)
		}
		if isPrivileged(w.statefulSet()) {
			w.clock.SetTime(w.clock.Now().Add(res.RequeueAfter))
			w.reconcileOK()
		}
		if isPrivileged(w.statefulSet()) {
			t.Fatalf("restore %d did not land once its backoff passed", i+1)
		}
	}
	w.handEdit(privileged)
	res, err := w.reconcile() // the sixth restore waits 80 s
	if err != nil {
		t.Fatal(err)
	}
	if !isPrivileged(w.statefulSet()) || res.RequeueAfter < time.Minute {
		t.Fatalf("precondition: the next restore waits over a minute (requeue after %s)", res.RequeueAfter)
	}
	// The platform team moves the template to Passive: the outstanding
	// Update request is withdrawn, and the runtime reopens.
	tmpl := w.template()
	tmpl.Spec.UpdatePolicy.Strategy = lullv1.UpdateStrategyPassive
	if err := w.c.Update(context.Background(), tmpl); err != nil {
		t.Fatal(err)
	}
	observe(t, w)
	w.reconcileOK()
	// The withdrawal is a passing state, written once it has lasted
	// SettleDelay.
	w.clock.SetTime(w.clock.Now().Add(SettleDelay + time.Second))
	w.reconcileOK()
	if d := w.session().Status.Drain; d != nil {
		t.Errorf("while a StatefulSet restore waits, the drain request %s the Passive strategy withdraws stays outstanding (the runtime keeps refusing turns)", d.RequestID)
	}
}

// observe publishes the StatefulSet's status as the StatefulSet
// controller would once it has seen the current generation.
func observe(t *testing.T, w *world) {
	t.Helper()
	sts := w.statefulSet()
	sts.Status.ObservedGeneration = sts.Generation
	sts.Status.UpdateRevision = "alice-new"
	if err := w.c.Status().Update(context.Background(), sts); err != nil {
		t.Fatal(err)
	}
}

// While a restore of the StatefulSet waits, a step that acts on it or its
// pod waits too, keeping the drain request and the commitment as they
// are; a Wait is taken, withdrawing a request, but neither makes one nor
// changes one.
func TestHeldForRestoreTakesOnlyStepsThatMakeTheSessionNoLessSafe(t *testing.T) {
	current := &lullv1.DrainRequest{RequestID: "update-1", PodUID: "pod-1"}
	committed := &lullv1.Replacement{PodUID: "pod-1", Reason: lullv1.ReplacementDrained}
	extended := current.DeepCopy()
	extended.Deadline = &metav1.Time{Time: t0}
	wait := errRestoreDeferred{kind: "StatefulSet", name: "alice", drift: "spec changed", at: t0.Add(time.Minute), restores: 6}
	for _, tc := range []struct {
		name        string
		drain       *lullv1.DrainRequest
		replacement *lullv1.Replacement
		a           rollout.Action
		want        rollout.Action
	}{
		{name: "a drain request waits", a: rollout.Action{Kind: rollout.RequestDrain, Drain: current},
			want: rollout.Action{Kind: rollout.Wait, Reason: lullv1.ReasonRevisionUnknown}},
		{name: "a commitment waits", drain: current, a: rollout.Action{Kind: rollout.Commit, Drain: current, Replacement: committed, PodUID: "pod-1"},
			want: rollout.Action{Kind: rollout.Wait, Reason: lullv1.ReasonRevisionUnknown, Drain: current}},
		{name: "a committed delete waits, the commitment kept", drain: current, replacement: committed,
			a:    rollout.Action{Kind: rollout.DeletePod, Drain: current, Replacement: committed, PodUID: "pod-1"},
			want: rollout.Action{Kind: rollout.Wait, Reason: lullv1.ReasonRevisionUnknown, Drain: current, Replacement: committed}},
		{name: "a suspension waits", a: rollout.Action{Kind: rollout.SuspendSession},
			want: rollout.Action{Kind: rollout.Wait, Reason: lullv1.ReasonRevisionUnknown}},
		{name: "a withdrawal is taken", drain: current, a: rollout.Action{Kind: rollout.Wait, Reason: lullv1.ReasonUpdatePending},
			want: rollout.Action{Kind: rollout.Wait, Reason: lullv1.ReasonUpdatePending}},
		{name: "a deadline is not added", drain: current, a: rollout.Action{Kind: rollout.Wait, Reason: lullv1.ReasonDraining, Drain: extended},
			want: rollout.Action{Kind: rollout.Wait, Reason: lullv1.ReasonDraining, Drain: current}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := rollout.Observed{Now: t0, Session: &lullv1.Session{Status: lullv1.SessionStatus{Drain: tc.drain, Replacement: tc.replacement}}}
			got := heldForRestore(o, tc.a, wait)
			got.Message = ""
			if !equality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("heldForRestore(%+v) = %+v, want %+v", tc.a, got, tc.want)
			}
		})
	}
}
