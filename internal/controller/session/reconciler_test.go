package session

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"lull.dev/lull/internal/render"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
	"lull.dev/lull/internal/dev/testenv"
)

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// world is one session with its template, StatefulSet and a stale pod, in a
// fake client that applies merge patches as the API server does.
type world struct {
	t        *testing.T
	c        client.WithWatch
	r        *Reconciler
	events   *events.FakeRecorder
	clock    *clocktesting.FakePassiveClock
	patches  atomic.Int32 // status patches that reached the store
	deletes  []client.DeleteOptions
	key      types.NamespacedName
	podUID   types.UID
	staleRev string
}

// newWorld builds the world; funcs intercept the client (the reconciler's
// reads, writes and live reads all go through it). edit changes the session
// before it is stored.
func newWorld(t *testing.T, funcs interceptor.Funcs, edit func(s *lullv1.Session, pod *corev1.Pod)) *world {
	t.Helper()
	w := &world{t: t, events: events.NewFakeRecorder(100), clock: clocktesting.NewFakePassiveClock(t0),
		key: types.NamespacedName{Namespace: "ns", Name: "alice"}, podUID: "pod-1", staleRev: "alice-old"}
	tmpl := &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "agent"},
		Spec: lullv1.SessionTemplateSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: lullv1.RuntimeContainerName, Image: "example.com/agent:2"}}}}},
		// The template controller has admitted alice's first drain request
		// to the rollout's wave.
		Status: lullv1.SessionTemplateStatus{Wave: []lullv1.WaveEntry{{Session: "alice", Sequence: 1}}}}
	s := &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice", UID: "session-uid"},
		Spec: lullv1.SessionSpec{TemplateRef: lullv1.TemplateReference{Name: "agent"}}}
	sts, err := render.StatefulSet(s, tmpl, 1)
	if err != nil {
		t.Fatal(err)
	}
	sts.OwnerReferences = []metav1.OwnerReference{{APIVersion: lullv1.GroupVersion.String(), Kind: "Session", Name: s.Name, UID: s.UID, Controller: ptrTo(true)}}
	sts.UID = "sts-1"
	// As lull's create left it: the API server's first generation, recorded.
	sts.Generation = 1
	sts.Annotations[lullv1.AnnotationSpecWritten] = formatSpecWritten(1, sts.Annotations[render.AnnotationSpecHash], sts.UID)
	sts.Status = appsv1.StatefulSetStatus{UpdateRevision: "alice-new"}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice-0", UID: w.podUID,
			Labels:          map[string]string{lullv1.LabelSession: "alice", appsv1.ControllerRevisionHashLabelKey: w.staleRev},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{{Name: lullv1.RuntimeContainerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
	}
	if edit != nil {
		edit(s, pod)
	}
	next := funcs.SubResourcePatch
	funcs.SubResourcePatch = func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
		var err error
		if next != nil {
			err = next(ctx, c, sub, o, p, opts...)
		} else {
			err = c.SubResource(sub).Patch(ctx, o, p, opts...)
		}
		if err == nil {
			w.patches.Add(1)
		}
		return err
	}
	nextDelete := funcs.Delete
	funcs.Delete = func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
		var do client.DeleteOptions
		do.ApplyOptions(opts)
		w.deletes = append(w.deletes, do)
		if nextDelete != nil {
			return nextDelete(ctx, c, o, opts...)
		}
		return c.Delete(ctx, o, opts...)
	}
	sch := testenv.Scheme()
	base := withSessionIndex(fake.NewClientBuilder(), sch).WithScheme(sch).
		WithObjects(tmpl, s, sts, pod).
		WithStatusSubresource(&lullv1.Session{}, &lullv1.SessionTemplate{}, &appsv1.StatefulSet{}).
		Build()
	// The fake client does not run the StatefulSet controller: give the
	// StatefulSet the status it would publish.
	stored := &appsv1.StatefulSet{}
	if err := base.Get(context.Background(), w.key, stored); err != nil {
		t.Fatal(err)
	}
	stored.Status = appsv1.StatefulSetStatus{ObservedGeneration: stored.Generation, UpdateRevision: "alice-new"}
	if err := base.Status().Update(context.Background(), stored); err != nil {
		t.Fatal(err)
	}
	w.c = interceptor.NewClient(base, funcs)
	w.r = &Reconciler{Client: w.c, APIReader: w.c, Recorder: w.events, Clock: w.clock}
	return w
}

func ptrTo[T any](v T) *T { return &v }

func (w *world) reconcile() (ctrl.Result, error) {
	w.t.Helper()
	return w.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: w.key})
}

func (w *world) session() *lullv1.Session {
	w.t.Helper()
	s := &lullv1.Session{}
	if err := w.c.Get(context.Background(), w.key, s); err != nil {
		w.t.Fatal(err)
	}
	return s
}

func (w *world) podExists() bool {
	err := w.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "alice-0"}, &corev1.Pod{})
	return err == nil
}

func (w *world) eventReasons() []string {
	var out []string
	for {
		select {
		case e := <-w.events.Events:
			out = append(out, strings.Fields(e)[1])
		default:
			return out
		}
	}
}

// drainedWorld has a drain request outstanding for the stale pod and its
// runtime's matching Drained report.
func drainedWorld(t *testing.T, funcs interceptor.Funcs) *world {
	return newWorld(t, funcs, drainedReport)
}

// drainedReport is drainedWorld's session: a drain request outstanding for
// the stale pod and its runtime's matching Drained report.
func drainedReport(s *lullv1.Session, pod *corev1.Pod) {
	id := drain.RequestID(pod.UID, lullv1.DrainReasonUpdate, 1)
	s.Status.DrainSequence = 1
	s.Status.Drain = &lullv1.DrainRequest{RequestID: id, PodUID: pod.UID, Reason: lullv1.DrainReasonUpdate, Revision: "alice-new", Sequence: 1, RequestedAt: metav1.NewTime(t0)}
	s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, RequestID: id, State: lullv1.RuntimeDrained}
}

// A Drained report is committed (one status write, with the observed
// resourceVersion as a precondition), then the pod is deleted with a UID precondition, and the
// Event follows the delete.
func TestDrainedReportCommitsThenDeletes(t *testing.T) {
	w := drainedWorld(t, interceptor.Funcs{})
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	s := w.session()
	if s.Status.Replacement == nil || s.Status.Replacement.PodUID != w.podUID || s.Status.Replacement.Reason != lullv1.ReplacementDrained {
		t.Fatalf("status.replacement = %+v, want the Drained commitment for %s", s.Status.Replacement, w.podUID)
	}
	if s.Status.Drain == nil || s.Status.Runtime == nil || s.Status.Runtime.State != lullv1.RuntimeDrained {
		t.Fatalf("the commit must keep the request and leave the runtime's report: %+v", s.Status)
	}
	if w.podExists() {
		t.Fatal("pod not deleted after the commit")
	}
	if len(w.deletes) != 1 || w.deletes[0].Preconditions == nil || *w.deletes[0].Preconditions.UID != w.podUID {
		t.Fatalf("deletes = %+v, want one with the pod's UID precondition", w.deletes)
	}
	if got := w.patches.Load(); got != 1 {
		t.Errorf("status patches = %d, want 1 (the commit)", got)
	}
	if got := w.eventReasons(); len(got) != 1 || got[0] != lullv1.ReasonDrained {
		t.Errorf("events = %v, want [Drained]", got)
	}
}

// The cache still shows a Drained report, but on the API server another
// writer has withdrawn the request and the runtime has reopened (Serving,
// a turn in flight). The commitment is written with the cached version as a
// precondition, so the API server refuses it: nothing is committed or
// deleted.
func TestCommitRefusedWhenTheSessionMovedOn(t *testing.T) {
	var stale *lullv1.Session
	w := drainedWorld(t, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
			if s, ok := o.(*lullv1.Session); ok && stale != nil {
				stale.DeepCopyInto(s) // the lagging cache
				return nil
			}
			return c.Get(ctx, key, o, opts...)
		},
	})
	cached := w.session()
	live := cached.DeepCopy()
	live.Status.Drain = nil
	live.Status.Runtime = &lullv1.RuntimeReport{PodUID: w.podUID, State: lullv1.RuntimeServing, ActiveTurns: 1}
	if err := w.c.Status().Update(context.Background(), live); err != nil {
		t.Fatal(err)
	}
	stale = cached
	if _, err := w.reconcile(); err == nil || !apierrors.IsConflict(errors.Unwrap(err)) && !strings.Contains(err.Error(), "conflict") && !strings.Contains(err.Error(), "modified") {
		t.Fatalf("reconcile on a stale cache = %v, want the commitment refused with a Conflict", err)
	}
	stale = nil
	if len(w.deletes) != 0 || !w.podExists() {
		t.Fatal("pod deleted although the Session on the API server no longer held a Drained report")
	}
	if s := w.session(); s.Status.Replacement != nil {
		t.Fatalf("committed on a stale view: %+v", s.Status.Replacement)
	}
	if got := w.eventReasons(); len(got) != 0 {
		t.Errorf("events = %v, want none: nothing happened", got)
	}
}

// A second writer changes the session between the read and the commit
// write: the write meets a Conflict, nothing is deleted, and the next
// reconcile commits and deletes.
func TestCommitConflictDeletesNothing(t *testing.T) {
	var conflicts atomic.Int32
	w := drainedWorld(t, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			if conflicts.Add(1) == 1 {
				return apierrors.NewConflict(schema.GroupResource{Group: "lull.dev", Resource: "sessions"}, o.GetName(), nil)
			}
			return c.SubResource(sub).Patch(ctx, o, p, opts...)
		},
	})
	if _, err := w.reconcile(); err == nil {
		t.Fatal("a conflicting commit must be an error (retried)")
	}
	if len(w.deletes) != 0 {
		t.Fatal("pod deleted although the commit was refused")
	}
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if w.podExists() || w.session().Status.Replacement == nil {
		t.Fatal("the retried reconcile did not commit and delete")
	}
}

// A failed stale pod's replacement is counted in the commit, before the
// delete: a Conflict on that write loses neither the count nor the backoff,
// and the delete follows the commitment.
func TestFailureCountSurvivesAConflict(t *testing.T) {
	var calls atomic.Int32
	w := newWorld(t, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			if calls.Add(1) == 1 {
				return apierrors.NewConflict(schema.GroupResource{Group: "lull.dev", Resource: "sessions"}, o.GetName(), nil)
			}
			return c.SubResource(sub).Patch(ctx, o, p, opts...)
		},
	}, func(_ *lullv1.Session, pod *corev1.Pod) {
		pod.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
	})
	if _, err := w.reconcile(); err == nil {
		t.Fatal("want the conflict returned")
	}
	if len(w.deletes) != 0 {
		t.Fatal("deleted before the failure was counted")
	}
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	s := w.session()
	if s.Status.FailedReplacements != 1 || s.Status.LastFailedReplacementTime == nil {
		t.Fatalf("failure bookkeeping = %d at %v, want 1 at %s", s.Status.FailedReplacements, s.Status.LastFailedReplacementTime, t0)
	}
	if len(w.deletes) != 1 || w.deletes[0].Preconditions == nil || *w.deletes[0].Preconditions.UID != w.podUID {
		t.Fatalf("deletes = %+v, want one with the pod's UID precondition", w.deletes)
	}
}

// A busy runtime next to a crash-looping sidecar is drained, not deleted.
func TestFailingSidecarDoesNotDeleteABusyPod(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, func(s *lullv1.Session, pod *corev1.Pod) {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: "mesh-proxy",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}})
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, State: lullv1.RuntimeServing, ActiveTurns: 3}
	})
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if len(w.deletes) != 0 {
		t.Fatal("busy pod deleted because of its sidecar")
	}
	if d := w.session().Status.Drain; d == nil || d.PodUID != w.podUID {
		t.Fatalf("drain = %+v, want a request for the pod", d)
	}
	if got := w.eventReasons(); len(got) != 1 || got[0] != lullv1.ReasonDrainRequested {
		t.Errorf("events = %v, want [DrainRequested] after the write", got)
	}
}

// An Update request turned into a Manual one (suspended mid-rollout) is
// written whole: the Update's revision is cleared on the server, so the
// next reconcile finds nothing to write.
func TestNestedStatusFieldsAreClearedOnce(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, func(s *lullv1.Session, pod *corev1.Pod) {
		s.Spec.Suspend = true
		s.Status.DrainSequence = 1
		s.Status.Drain = &lullv1.DrainRequest{RequestID: drain.RequestID(pod.UID, lullv1.DrainReasonUpdate, 1), PodUID: pod.UID,
			Reason: lullv1.DrainReasonUpdate, Revision: "alice-new", Sequence: 1, RequestedAt: metav1.NewTime(t0)}
	})
	for range 3 {
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	d := w.session().Status.Drain
	if d == nil || d.Reason != lullv1.DrainReasonManual || d.Revision != "" {
		t.Fatalf("drain = %+v, want a Manual request without a revision", d)
	}
	if got := w.patches.Load(); got != 1 {
		t.Errorf("status patches over 3 reconciles = %d, want 1", got)
	}
}

// A suspended session whose runtime drained is scaled to zero, never its
// pod deleted: a delete while the StatefulSet still wants a replica would
// make it create a new pod, which the next reconcile would then judge.
func TestDrainedSuspensionScalesAwayWithoutADelete(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, func(s *lullv1.Session, pod *corev1.Pod) {
		s.Spec.Suspend = true
		s.Status.DrainSequence = 1
		d := &lullv1.DrainRequest{RequestID: drain.RequestID(pod.UID, lullv1.DrainReasonManual, 1), PodUID: pod.UID,
			Reason: lullv1.DrainReasonManual, Sequence: 1, RequestedAt: metav1.NewTime(t0)}
		s.Status.Drain = d
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, RequestID: d.RequestID, State: lullv1.RuntimeDrained}
	})
	for range 3 {
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	if c := w.session().Status.Replacement; c == nil || c.Reason != lullv1.ReplacementDrained {
		t.Fatalf("replacement = %+v, want the drained pod committed", c)
	}
	if !w.podExists() {
		t.Error("the drained pod was deleted; it must be scaled away")
	}
	sts := &appsv1.StatefulSet{}
	if err := w.c.Get(context.Background(), w.key, sts); err != nil {
		t.Fatal(err)
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 0 {
		t.Errorf("StatefulSet replicas = %v, want 0", sts.Spec.Replicas)
	}
}

// A session blocked by a refusal the controller cannot see the fix of (a
// quota, a webhook) is retried with backoff; the condition names the next
// try, and a reconcile caused by that write writes nothing.
func TestBlockedSessionIsRetried(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			if _, ok := o.(*appsv1.StatefulSet); ok {
				return apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "statefulsets"}, o.GetName(), errString(`admission webhook "policy.example.com" denied the request`))
			}
			return c.Patch(ctx, o, p, opts...)
		},
	}, nil)
	// A template change makes the StatefulSet need a patch.
	tmpl := &lullv1.SessionTemplate{}
	if err := w.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "agent"}, tmpl); err != nil {
		t.Fatal(err)
	}
	tmpl.RuntimeContainer().Image = "example.com/agent:3"
	if err := w.c.Update(context.Background(), tmpl); err != nil {
		t.Fatal(err)
	}
	res, err := w.reconcile()
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter != 5*time.Second {
		t.Errorf("RequeueAfter = %s, want 5s", res.RequeueAfter)
	}
	c := meta.FindStatusCondition(w.session().Status.Conditions, lullv1.ConditionReady)
	if c == nil || c.Reason != "RenderFailed" || !strings.Contains(c.Message, "next try at "+t0.Add(5*time.Second).Format(time.RFC3339)) {
		t.Fatalf("Ready = %+v, want RenderFailed naming the next try", c)
	}
	writes := w.patches.Load()
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if w.patches.Load() != writes {
		t.Error("a reconcile at the same moment wrote the status again")
	}
	w.clock.SetTime(t0.Add(6 * time.Second))
	if res, _ := w.reconcile(); res.RequeueAfter != 9*time.Second {
		t.Errorf("second retry in %s, want 9s (at +15s)", res.RequeueAfter)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

func TestExpiredDelta(t *testing.T) {
	r := func(pod types.UID, n int64) *lullv1.RuntimeReport {
		return &lullv1.RuntimeReport{PodUID: pod, ExpiredTurns: n}
	}
	for _, tc := range []struct {
		a, b *lullv1.RuntimeReport
		want int64
	}{
		{r("p", 1), r("p", 3), 2}, {r("p", 3), r("p", 3), 0}, {r("p", 3), r("q", 5), 0}, {nil, r("p", 2), 0}, {r("p", 4), r("p", 1), 0},
	} {
		if got := expiredDelta(tc.a, tc.b); got != tc.want {
			t.Errorf("expiredDelta(%+v, %+v) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// An owned object whose lull labels were removed drops out of lull's
// label-filtered cache; the controller takes it back (labels and rendered
// spec) instead of leaving it behind while the session says UpToDate.
func TestOwnedObjectThatLostItsLabelsIsTakenBack(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, nil)
	sts := &appsv1.StatefulSet{}
	if err := w.c.Get(context.Background(), w.key, sts); err != nil {
		t.Fatal(err)
	}
	sts.Labels = map[string]string{"team": "payments"}
	if err := w.c.Update(context.Background(), sts); err != nil {
		t.Fatal(err)
	}
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Get(context.Background(), w.key, sts); err != nil {
		t.Fatal(err)
	}
	if sts.Labels[lullv1.LabelSession] != "alice" || sts.Labels["team"] != "payments" {
		t.Errorf("labels = %v, want lull's back and the user's kept", sts.Labels)
	}
}
