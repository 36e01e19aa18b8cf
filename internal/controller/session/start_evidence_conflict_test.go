package session

import (
	"context"
	"sync/atomic"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Guarantee 3 of issue 21: evidence that a runtime started, once seen, is
// recorded at once and cannot be erased by a later write to
// status.runtime.
//
// The scenario: alice's stale pod runs a runtime that has just reported
// Serving and holds a turn; the kubelet has not published the container's
// start yet (servingBehindCreating). The controller reads the session with
// that report and decides to record it with its step (a drain request).
// Before its status write lands, a second writer overwrites status.runtime
// (an admin's `kubectl edit --subresource=status`, a stale writer's late
// report naming another pod). The controller's write carries the
// resourceVersion it read, so the API server refuses it with a Conflict
// (reconcileStatus: retryStep); recordStartOnEnd writes the record on the
// same resourceVersion and is refused too. The next reconcile reads a
// session whose report no longer names the pod and no record of its
// start: the pod is judged never started and deleted without a drain,
// under the turn its runtime holds. The record is a fact about a report
// the controller saw, true whatever was written since; a record-only
// write needs no precondition on the version it was seen in.
func TestAStartSeenInAVersionAnotherWriterReplacedIsRecorded(t *testing.T) {
	var w *world
	var raced atomic.Bool
	funcs := interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
		if _, ok := o.(*lullv1.Session); ok && !raced.Swap(true) {
			// The second writer's write lands first.
			s := &lullv1.Session{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(o), s); err != nil {
				return err
			}
			s.Status.Runtime = &lullv1.RuntimeReport{PodUID: "pod-0", State: lullv1.RuntimeServing}
			if err := c.Status().Update(ctx, s); err != nil {
				return err
			}
		}
		return c.SubResource(sub).Patch(ctx, o, p, opts...)
	}}
	w = newWorld(t, funcs, servingBehindCreating)

	_, _ = w.reconcile() // the write meets the Conflict: decided again
	recorded := w.session().Status.StartedPodUID
	for range 3 {
		w.reconcileOK()
	}
	if recorded != w.podUID || !w.podExists() {
		t.Errorf("status.startedPodUID = %q after the reconcile that saw pod %s's runtime report (another writer replaced it before the write landed); "+
			"pod deleted = %v (deletes %d, replacement %+v)",
			recorded, w.podUID, !w.podExists(), len(w.deletes), w.session().Status.Replacement)
	}
}
