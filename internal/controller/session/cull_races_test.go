package session

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
)

// setIdlePolicy gives the world's template an idle policy.
func setIdlePolicy(t *testing.T, w *world, p lullv1.IdlePolicy) {
	t.Helper()
	tmpl := &lullv1.SessionTemplate{}
	if err := w.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "agent"}, tmpl); err != nil {
		t.Fatal(err)
	}
	tmpl.Spec.Idle = &p
	if err := w.c.Update(context.Background(), tmpl); err != nil {
		t.Fatal(err)
	}
}

// idleDrainedWorld: alice's current pod has been idle for an hour (judged
// idle before), under suspendAfter 30m; an Idle drain request is
// outstanding and the runtime answered Drained with a fresh report.
func idleDrainedWorld(t *testing.T, funcs interceptor.Funcs) *world {
	w := newWorld(t, funcs, func(s *lullv1.Session, pod *corev1.Pod) {
		pod.Labels[appsv1.ControllerRevisionHashLabelKey] = "alice-new"
		pod.CreationTimestamp = metav1.NewTime(t0.Add(-2 * time.Hour))
		last := metav1.NewTime(t0.Add(-time.Hour))
		id := drain.RequestID(pod.UID, lullv1.DrainReasonIdle, 1)
		s.Status.DrainSequence = 1
		s.Status.Drain = &lullv1.DrainRequest{RequestID: id, PodUID: pod.UID, Reason: lullv1.DrainReasonIdle, Sequence: 1, RequestedAt: metav1.NewTime(t0.Add(-time.Second))}
		reported := metav1.NewTime(t0.Add(-time.Second))
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, RequestID: id, State: lullv1.RuntimeDrained,
			LastActivity: &last, RefreshSeconds: 10, ReportedAt: &reported}
		s.Status.Lifecycle = &lullv1.LifecycleStatus{IdlePodUID: pod.UID, IdleSince: &last, IdleActivity: &last}
	})
	setIdlePolicy(t, w, lullv1.IdlePolicy{SuspendAfter: &metav1.Duration{Duration: 30 * time.Minute}})
	return w
}

// Guarantee 4: a cull is a drain, then a suspension (StatefulSet to zero,
// claims kept). The drained pod is committed, then the session suspended:
// the pod must not be deleted on its own (the StatefulSet would only make a
// new one, and the session would never be suspended).
func TestIdleCullCommitSuspendsInsteadOfDeletingThePod(t *testing.T) {
	w := idleDrainedWorld(t, interceptor.Funcs{})
	for i := range 3 {
		if _, err := w.reconcile(); err != nil {
			t.Fatalf("reconcile %d: %v", i, err)
		}
	}
	s := w.session()
	if len(w.deletes) != 0 {
		t.Errorf("%d deletes after the idle commit; the idle-culled pod must be scaled away by the suspension, not deleted", len(w.deletes))
	}
	if !s.Spec.Suspend {
		t.Errorf("spec.suspend = false after an idle cull's drain was committed; want the session suspended (replacement %+v)", s.Status.Replacement)
	}
	sts := &appsv1.StatefulSet{}
	if err := w.c.Get(context.Background(), w.key, sts); err != nil {
		t.Fatal(err)
	}
	if s.Spec.Suspend && (sts.Spec.Replicas == nil || *sts.Spec.Replicas != 0) {
		t.Errorf("StatefulSet replicas %v after the idle suspension; want 0", sts.Spec.Replicas)
	}
	if got := w.eventReasons(); len(got) != 1 || got[0] != "IdleSuspend" {
		t.Errorf("events %v, want [IdleSuspend]", got)
	}
}

// Guarantee 4, delete: the drained pod is committed, then the Session is
// deleted (UID and resourceVersion preconditions); the pod is not deleted
// on its own first (the StatefulSet would replace it, and the session,
// judged again on a new pod, would never be deleted).
func TestIdleDeleteCommitDeletesTheSessionNotThePod(t *testing.T) {
	w := idleDrainedWorld(t, interceptor.Funcs{})
	setIdlePolicy(t, w, lullv1.IdlePolicy{DeleteAfter: &metav1.Duration{Duration: 30 * time.Minute}})
	for i := range 2 {
		if _, err := w.reconcile(); err != nil {
			t.Fatalf("reconcile %d: %v", i, err)
		}
	}
	if len(w.deletes) != 1 || w.deletes[0].Preconditions == nil || w.deletes[0].Preconditions.ResourceVersion == nil {
		t.Fatalf("deletes %+v; want exactly one, of the Session, with its resourceVersion as a precondition", w.deletes)
	}
	if !w.podExists() {
		t.Error("the pod was deleted directly; it goes with the session")
	}
	if got := w.eventReasons(); len(got) != 1 || got[0] != "IdleDelete" {
		t.Errorf("events %v, want [IdleDelete]", got)
	}
}

// The lifecycle status must be stable when nothing changes: a field that
// moves on every reconcile (a time not truncated, an idle clock restarted)
// would make every status write trigger the next, forever. In each state,
// reconciles at later moments that cross no deadline write nothing after
// the first.
func TestLifecycleStatusIsStableWhenNothingChanges(t *testing.T) {
	idle := func(s *lullv1.Session, pod *corev1.Pod) {
		pod.Labels[appsv1.ControllerRevisionHashLabelKey] = "alice-new"
		pod.CreationTimestamp = metav1.NewTime(t0.Add(-time.Minute))
		last := metav1.NewTime(t0.Add(-time.Minute).Add(123 * time.Millisecond))
		reported := metav1.NewTime(t0)
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, State: lullv1.RuntimeServing, LastActivity: &last, RefreshSeconds: 3600, ReportedAt: &reported}
	}
	for name, edit := range map[string]func(s *lullv1.Session, pod *corev1.Pod){
		"idle": idle,
		"idle, lastActivity in the future": func(s *lullv1.Session, pod *corev1.Pod) {
			idle(s, pod)
			future := metav1.NewTime(t0.Add(24 * time.Hour))
			s.Status.Runtime.LastActivity = &future
		},
		"idle, no activity yet": func(s *lullv1.Session, pod *corev1.Pod) {
			idle(s, pod)
			s.Status.Runtime.LastActivity = nil
		},
		"busy": func(s *lullv1.Session, pod *corev1.Pod) {
			idle(s, pod)
			s.Status.Runtime.ActiveTurns = 2
		},
		"not reporting": func(s *lullv1.Session, pod *corev1.Pod) {
			idle(s, pod)
			old := metav1.NewTime(t0.Add(-3 * time.Hour))
			s.Status.Runtime.ReportedAt = &old
		},
		"suspended, never judged idle": func(s *lullv1.Session, pod *corev1.Pod) {
			s.Spec.Suspend = true
		},
		"no report": func(s *lullv1.Session, pod *corev1.Pod) {
			pod.Labels[appsv1.ControllerRevisionHashLabelKey] = "alice-new"
			pod.CreationTimestamp = metav1.NewTime(t0.Add(-time.Minute))
		},
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, interceptor.Funcs{}, edit)
			if name == "suspended, never judged idle" {
				if err := w.c.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice-0"}}); err != nil {
					t.Fatal(err)
				}
			}
			tmpl := &lullv1.SessionTemplate{}
			if err := w.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "agent"}, tmpl); err != nil {
				t.Fatal(err)
			}
			tmpl.Spec.Idle = &lullv1.IdlePolicy{SuspendAfter: &metav1.Duration{Duration: 10 * time.Hour}, DeleteAfter: &metav1.Duration{Duration: 20 * time.Hour}}
			tmpl.Spec.MaxLifetime = &metav1.Duration{Duration: 10 * time.Hour}
			if err := w.c.Update(context.Background(), tmpl); err != nil {
				t.Fatal(err)
			}
			for i := range 4 {
				w.clock.SetTime(t0.Add(time.Duration(i)*7*time.Second + 300*time.Millisecond))
				if _, err := w.reconcile(); err != nil {
					t.Fatal(err)
				}
			}
			first := w.patches.Load()
			var l1 *lullv1.LifecycleStatus
			if l := w.session().Status.Lifecycle; l != nil {
				l1 = l.DeepCopy()
			}
			for i := range 5 {
				w.clock.SetTime(t0.Add(time.Minute + time.Duration(i)*13*time.Second + 700*time.Millisecond))
				if _, err := w.reconcile(); err != nil {
					t.Fatal(err)
				}
			}
			if got := w.patches.Load(); got != first {
				t.Errorf("%d status writes in 5 reconciles with nothing changed; lifecycle before %+v after %+v", got-first, l1, w.session().Status.Lifecycle)
			}
		})
	}
}

// Guarantees 4 and 5 through the reconciler: an idle cull records one
// IdleSuspend and one Suspended Event; the resume one Resumed Event; the
// resumed session's idle clock starts at its new pod's first report, the
// old pod's report and lastActivity ignored, however many reconciles run.
func TestIdleSuspendThenResumeEventsAndClock(t *testing.T) {
	w := idleDrainedWorld(t, interceptor.Funcs{})
	ctx := context.Background()
	for range 3 {
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	// The StatefulSet controller removes the pod (replicas 0).
	if err := w.c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice-0"}}); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		w.clock.SetTime(t0.Add(time.Duration(i) * 3 * time.Second))
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	s := w.session()
	if s.Status.Phase != lullv1.SessionSuspended || s.Status.Drain != nil || s.Status.Replacement != nil {
		t.Fatalf("after the idle suspension: phase %s drain %+v replacement %+v", s.Status.Phase, s.Status.Drain, s.Status.Replacement)
	}
	if got := w.eventReasons(); len(got) != 2 || got[0] != "IdleSuspend" || got[1] != "Suspended" {
		t.Fatalf("events %v, want [IdleSuspend Suspended]", got)
	}

	// lull resume: spec.suspend false; later the StatefulSet makes pod-2.
	resumedAt := t0.Add(time.Hour)
	w.clock.SetTime(resumedAt)
	s.Spec.Suspend = false
	if err := w.c.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice-0", UID: "pod-2", CreationTimestamp: metav1.NewTime(resumedAt),
		Labels:          map[string]string{lullv1.LabelSession: "alice", appsv1.ControllerRevisionHashLabelKey: "alice-new"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "alice", UID: "sts-1", Controller: ptrTo(true)}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: lullv1.RuntimeContainerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}
	if err := w.c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		w.clock.SetTime(resumedAt.Add(time.Duration(i+1) * 6 * time.Second))
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	// The old pod's report is still in status.runtime: no clock yet.
	if l := w.session().Status.Lifecycle; l != nil && l.IdleSince != nil {
		t.Fatalf("resumed, new pod not reported: lifecycle %+v; want no idle clock", l)
	}
	// pod-2's runtime reports idle, with a lastActivity from long before
	// (restored from the workspace, or the old pod's).
	firstReport := resumedAt.Add(30 * time.Second)
	w.clock.SetTime(firstReport)
	s = w.session()
	old := metav1.NewTime(t0.Add(-5 * time.Hour))
	reported := metav1.NewTime(firstReport)
	s.Status.Runtime = &lullv1.RuntimeReport{PodUID: "pod-2", State: lullv1.RuntimeServing, LastActivity: &old, RefreshSeconds: 10, ReportedAt: &reported}
	if err := w.c.Status().Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		w.clock.SetTime(firstReport.Add(time.Duration(i) * time.Second))
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	s = w.session()
	l := s.Status.Lifecycle
	if l == nil || l.IdleSince == nil || l.IdleSince.Time.Before(firstReport) || l.IdlePodUID != "pod-2" || s.Status.Drain != nil {
		t.Fatalf("new pod's first idle report: lifecycle %+v drain %+v; want the clock from that report", l, s.Status.Drain)
	}
	n := map[string]int{}
	for _, r := range w.eventReasons() {
		n[r]++
	}
	if n["Resumed"] != 1 || n["Suspended"] != 0 || n["IdleSuspend"] != 0 {
		t.Fatalf("events after the resume %v, want one Resumed", n)
	}
}

// committedIdleWorld: the Idle drain's replacement is committed on the API
// server, spec.suspend not yet set (a controller restarted between the
// two steps).
func committedIdleWorld(t *testing.T, funcs interceptor.Funcs) *world {
	w := idleDrainedWorld(t, funcs)
	s := w.session()
	s.Status.Replacement = &lullv1.Replacement{PodUID: w.podUID, Reason: lullv1.ReplacementDrained, RequestID: s.Status.Drain.RequestID, CommittedAt: metav1.NewTime(t0)}
	if err := w.c.Status().Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	return w
}

// Guarantee 4 across a controller restart between the commitment and the
// suspension: a new controller (nothing in memory) finishes the cull.
func TestRestartBetweenIdleCommitAndSuspendFinishesTheCull(t *testing.T) {
	w := committedIdleWorld(t, interceptor.Funcs{})
	w.r = &Reconciler{Client: w.c, APIReader: w.c, Recorder: w.events, Clock: w.clock}
	for range 2 {
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	if s := w.session(); !s.Spec.Suspend || len(w.deletes) != 0 {
		t.Fatalf("restarted controller: suspend=%v deletes %d; want the session suspended, the pod not deleted", s.Spec.Suspend, len(w.deletes))
	}
}

// Guarantees 1 and 4 with a lagging Session cache: the cache shows the
// committed idle drain; on the API server the runtime has since reported
// new activity (a turn refused as it sealed, reported before it saw the
// commitment). The suspension, decided on the cached version, is refused;
// once the cache catches up, the session is not suspended: its committed
// pod is replaced and it keeps running.
func TestActivityAfterTheIdleCommitIsNotSuspendedFromAStaleCache(t *testing.T) {
	var stale *lullv1.Session
	w := committedIdleWorld(t, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
			if s, ok := o.(*lullv1.Session); ok && stale != nil {
				stale.DeepCopyInto(s)
				return nil
			}
			return c.Get(ctx, key, o, opts...)
		},
	})
	cached := w.session()
	live := cached.DeepCopy()
	now := metav1.NewTime(t0)
	live.Status.Runtime.LastActivity, live.Status.Runtime.ReportedAt = &now, &now
	if err := w.c.Status().Update(context.Background(), live); err != nil {
		t.Fatal(err)
	}
	stale = cached
	_, _ = w.reconcile()
	stale = nil
	if s := w.session(); s.Spec.Suspend {
		t.Fatal("suspended on a cached version older than the runtime's report of new activity")
	}
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if s := w.session(); s.Spec.Suspend {
		t.Fatal("suspended although activity reached the API server")
	}
	if len(w.deletes) != 1 || w.deletes[0].Preconditions == nil || *w.deletes[0].Preconditions.UID != w.podUID {
		t.Fatalf("deletes %+v; want the committed pod replaced (UID precondition)", w.deletes)
	}
}

// Guarantee 5: a resume is a resume. The idle cull committed the drained
// pod and set spec.suspend; before the StatefulSet scaled the pod away (a
// second later, or longer if the controller restarted in between or its
// pod cache lags), the user ran lull resume, which set spec.suspend back
// to false. The controller must not suspend the session again: it replaces
// the committed pod, and the session runs on a new one. Nor may it record
// a second IdleSuspend Event.
func TestResumeBeforeTheScaleDownIsNotSuspendedAgain(t *testing.T) {
	w := committedIdleWorld(t, interceptor.Funcs{})
	if _, err := w.reconcile(); err != nil { // the suspension
		t.Fatal(err)
	}
	s := w.session()
	if !s.Spec.Suspend {
		t.Fatal("precondition: the idle cull suspends the session")
	}
	// lull resume, before the pod is scaled away.
	s.Spec.Suspend = false
	if err := w.c.Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	if s := w.session(); s.Spec.Suspend {
		t.Fatal("the user resumed the session, and the controller suspended it again")
	}
	n := map[string]int{}
	for _, r := range w.eventReasons() {
		n[r]++
	}
	if n["IdleSuspend"] != 1 {
		t.Errorf("events %v, want one IdleSuspend", n)
	}
	if len(w.deletes) != 1 || w.deletes[0].Preconditions == nil || *w.deletes[0].Preconditions.UID != w.podUID {
		t.Errorf("deletes %+v; want the committed pod replaced (UID precondition)", w.deletes)
	}
}
