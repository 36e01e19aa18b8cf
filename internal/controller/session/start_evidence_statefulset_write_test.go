package session

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// servingBehindCreating is the session of a stale pod whose runtime has
// reported Serving and holds a turn while the kubelet still shows its
// container being created (creating): the report is the only evidence
// that the runtime runs, and RecordStart asks for it to be recorded at
// once.
func servingBehindCreating(s *lullv1.Session, pod *corev1.Pod) {
	creating(pod)
	s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, State: lullv1.RuntimeServing, ActiveTurns: 1}
}

// Guarantee 3 of issue 21 (evidence that a runtime started, once seen, is
// recorded at once, including on every path that writes nothing for a
// while), once broken through the StatefulSet write that confirmWrite refuses.
//
// The scenario: alice's stale pod runs a runtime that has just reported
// Serving and holds a turn; the kubelet has not published the container's
// start yet (servingBehindCreating). Her template has just moved to
// example.com/agent:3, which the catalog on the API server refuses while
// the RuntimeCatalog informer still delivers a copy that lists it. The
// gate passes the image on the cached copy, ensureStatefulSet writes it,
// confirmWrite refuses the write on the API server's catalog with a
// Conflict, and reconcileStatefulSet ends the reconcile with retryStep:
// the step is decided again in 200 ms, and again, for as long as the
// informer lags, and no reconcile ever reaches the status write that
// would record the start. An admin's write of status.runtime in that
// window (or a late report of a previous runtime) erases the only
// evidence. Once the cache catches up, the gate holds the StatefulSet on
// agent:2 (which the catalog lists), and the next reconcile judges the
// stale pod never started and replaces it without a drain, under its
// runtime's turn. The restore backoff had the same gap
// (TestRestoreBackoffDoesNotDelayRecordingARuntimeStart).
func TestAStartSeenWhileAStatefulSetWriteIsRefusedOnTheLiveCatalogIsRecorded(t *testing.T) {
	ctx := context.Background()
	var live atomic.Bool
	var cached atomic.Pointer[lullv1.RuntimeCatalog]
	w := laggingWorld(t, &live, &cached, servingBehindCreating)
	cat := agentCatalog("2", "3")
	cached.Store(cat.DeepCopy()) // lists agent:3; the informer stops here
	cat.Spec.Images[0].Tags = []string{"2"}
	if err := w.c.Create(ctx, cat); err != nil {
		t.Fatal(err)
	}
	w.setImage("example.com/agent:3")

	for range 3 { // retryStep, again and again while the informer lags
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	recorded := w.session().Status.StartedPodUID
	if got := runtimeImage(w.statefulSet()); got != "example.com/agent:2" {
		t.Fatalf("setup: the StatefulSet moved to %s, which the API server's catalog refuses", got)
	}
	overwriteReport(t, w, &lullv1.RuntimeReport{PodUID: "pod-0", State: lullv1.RuntimeServing})
	cached.Store(nil) // the informer catches up
	for range 3 {
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	if recorded != w.podUID || !w.podExists() {
		t.Errorf("status.startedPodUID = %q after the reconciles that saw the report while the StatefulSet write was refused (want %q); "+
			"after status.runtime was overwritten, pod deleted = %v (replacement %+v)",
			recorded, w.podUID, !w.podExists(), w.session().Status.Replacement)
	}
}

// Guarantee 3 of issue 21, the same gap reached from a StatefulSet write
// that fails for a while: a validating webhook on StatefulSets (a policy
// engine, failurePolicy Fail) is down, so the API server answers every
// write of alice's StatefulSet with an internal error ("failed calling
// webhook"), which renderFailed does not classify and returns to the
// workqueue. Her template has just moved to a new image, so each reconcile
// writes the StatefulSet and ends there, before the status write, for as
// long as the webhook is down. Her stale pod's runtime reported Serving
// and holds a turn, the kubelet not showing the start yet
// (servingBehindCreating): the start is never recorded. An admin's write
// of status.runtime in that window erases the evidence; once the webhook
// answers again, the StatefulSet is written and the stale pod is judged
// never started and replaced without a drain, under its runtime's turn.
func TestAStartSeenWhileTheStatefulSetWriteFailsIsRecorded(t *testing.T) {
	var down atomic.Bool
	down.Store(true)
	funcs := apiServerStatefulSets(nil)
	webhookDown := func(o client.Object) error {
		if _, ok := o.(*appsv1.StatefulSet); ok && down.Load() {
			return apierrors.NewInternalError(errors.New(`failed calling webhook "validate.policy.example.com": failed to call webhook: Post "https://policy.example.svc:443/validate": dial tcp 10.0.0.9:443: connect: connection refused`))
		}
		return nil
	}
	update, patch := funcs.Update, funcs.Patch
	funcs.Update = func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
		if err := webhookDown(o); err != nil {
			return err
		}
		return update(ctx, c, o, opts...)
	}
	funcs.Patch = func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
		if err := webhookDown(o); err != nil {
			return err
		}
		return patch(ctx, c, o, p, opts...)
	}
	w := newWorld(t, funcs, servingBehindCreating)
	w.setImage("example.com/agent:3")

	for range 3 { // the workqueue's retries while the webhook is down
		_, _ = w.reconcile()
	}
	recorded := w.session().Status.StartedPodUID
	overwriteReport(t, w, &lullv1.RuntimeReport{PodUID: "pod-0", State: lullv1.RuntimeServing})
	down.Store(false) // the webhook answers again
	w.reconcileOK()   // the StatefulSet written
	observe(t, w)     // and its new generation observed
	for range 2 {
		w.reconcileOK()
	}
	if recorded != w.podUID || !w.podExists() {
		t.Errorf("status.startedPodUID = %q after the reconciles that saw the report while the StatefulSet write failed (want %q); "+
			"after status.runtime was overwritten, pod deleted = %v (replacement %+v)",
			recorded, w.podUID, !w.podExists(), w.session().Status.Replacement)
	}
}

// Guarantee 3 of issue 21, reached before the pod is observed: the
// session's identity cannot be written (a webhook on ServiceAccounts is
// down, an internal error renderFailed returns to the workqueue), so every
// reconcile ends in its identity phase, before it has read the pod. The
// start that only the report shows is recorded all the same
// (recordStartOnEnd reads the pod itself).
func TestAStartSeenWhileTheIdentityWriteFailsIsRecorded(t *testing.T) {
	var down atomic.Bool
	down.Store(true)
	funcs := apiServerStatefulSets(nil)
	create := funcs.Create
	funcs.Create = func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
		if _, ok := o.(*corev1.ServiceAccount); ok && down.Load() {
			return apierrors.NewInternalError(errors.New(`failed calling webhook "validate.policy.example.com": connection refused`))
		}
		if create != nil {
			return create(ctx, c, o, opts...)
		}
		return c.Create(ctx, o, opts...)
	}
	w := newWorld(t, funcs, servingBehindCreating)
	for range 3 { // the workqueue's retries while the webhook is down
		if _, err := w.reconcile(); err == nil {
			t.Fatal("a reconcile passed the identity phase while the ServiceAccount cannot be created")
		}
	}
	if got := w.session().Status.StartedPodUID; got != w.podUID {
		t.Errorf("status.startedPodUID = %q after reconciles that ended in the identity phase while the report names %s; want it recorded", got, w.podUID)
	}
}
