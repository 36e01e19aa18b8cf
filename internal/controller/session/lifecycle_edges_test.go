package session

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
)

func deleteTemplate(t *testing.T, w *world) {
	t.Helper()
	if err := w.c.Delete(context.Background(), &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "agent"}}); err != nil {
		t.Fatal(err)
	}
}

// The API server's time of a report's write (the managed-fields entry
// that owns status.runtime) is read, and the runtime's reportedAt never
// makes a report look missing: a runtime clock behind the server's must
// not turn a report into RuntimeNotReporting. A blocked session (its
// template gone) is judged the same way: its Active condition must not say
// RuntimeNotReporting for a runtime that reports.
func TestBlockedSessionJudgesItsReportOnTheServersClock(t *testing.T) {
	// The fake client keeps no managedFields: its reads carry the entry the
	// API server would have, the runtime's write a second before t0.
	written := metav1.NewTime(t0.Add(-time.Second))
	w := newWorld(t, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, o, opts...); err != nil {
				return err
			}
			if s, ok := o.(*lullv1.Session); ok {
				s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "lull-runtime", APIVersion: lullv1.GroupVersion.String(), Operation: metav1.ManagedFieldsOperationUpdate,
					Subresource: "status", Time: &written, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:runtime":{".":{},"f:state":{}}}}`)}}}
			}
			return nil
		},
	}, func(s *lullv1.Session, pod *corev1.Pod) {
		pod.Labels[appsv1.ControllerRevisionHashLabelKey] = "alice-new"
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		behind := metav1.NewTime(t0.Add(-10 * time.Minute)) // the runtime's clock is 10 minutes behind
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, State: lullv1.RuntimeServing, RefreshSeconds: 60, ReportedAt: &behind}
	})
	if got := ReportWrittenAt(w.session()); !got.Equal(written.Time) {
		t.Fatalf("precondition: ReportWrittenAt %v, want %v", got, written)
	}
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(w.session().Status.Conditions, lullv1.ConditionActive); c == nil || c.Reason == lullv1.ReasonRuntimeNotReporting {
		t.Fatalf("precondition: Active %+v, want the fresh report judged reporting", c)
	}
	deleteTemplate(t, w)
	w.clock.SetTime(t0.Add(time.Second))
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	s := w.session()
	if c := meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionReady); c == nil || c.Reason != lullv1.ReasonTemplateNotFound {
		t.Fatalf("precondition: Ready %+v, want TemplateNotFound", c)
	}
	if c := meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionActive); c == nil || c.Reason == lullv1.ReasonRuntimeNotReporting {
		t.Errorf("blocked session, report written a second ago by the API server's clock (reportedAt 10 minutes back by the runtime's): Active %+v; "+
			"want it judged reporting, as an unblocked session is", c)
	}
}

// Exactly one Suspended and one Resumed Event per suspension and resume,
// "each tied to the status write that changes the phase". A blocked
// session's status write changes the phase too (a suspended session's pod
// goes while its template is missing; a resume while it is missing): the
// Event must not be lost.
func TestSuspendAndResumeWhileBlockedRecordTheirEvents(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, func(s *lullv1.Session, pod *corev1.Pod) {
		pod.Labels[appsv1.ControllerRevisionHashLabelKey] = "alice-new"
		s.Spec.Suspend = true
	})
	ctx := context.Background()
	deleteTemplate(t, w)
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	// The pod goes (the StatefulSet was scaled away earlier, or a node
	// went): the phase becomes Suspended in a blocked write.
	if err := w.c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice-0"}}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		w.clock.SetTime(t0.Add(time.Duration(i+1) * time.Minute))
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	s := w.session()
	if s.Status.Phase != lullv1.SessionSuspended {
		t.Fatalf("precondition: phase %s, want Suspended", s.Status.Phase)
	}
	// Resumed while the template is still missing.
	s.Spec.Suspend = false
	if err := w.c.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		w.clock.SetTime(t0.Add(time.Duration(i+5) * time.Minute))
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	if s := w.session(); s.Status.Phase == lullv1.SessionSuspended {
		t.Fatalf("precondition: phase %s after the resume", s.Status.Phase)
	}
	n := map[string]int{}
	for _, r := range w.eventReasons() {
		n[r]++
	}
	if n["Suspended"] != 1 || n["Resumed"] != 1 {
		t.Errorf("events %v; want one Suspended and one Resumed", n)
	}
}

// An update with a deadline takes over an idle drain of a stale pod once
// admitted: the runtime's Drained answer to the Idle request is not an
// answer to the Update request. The pod is deleted only on a Drained report
// for the Update request (or past its deadline), never on the Idle one.
func TestUpdateTakeoverDoesNotCountTheIdleAnswer(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, func(s *lullv1.Session, pod *corev1.Pod) {
		// pod stays on the stale revision (alice-old)
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		last := metav1.NewTime(t0.Add(-time.Hour))
		id := drain.RequestID(pod.UID, lullv1.DrainReasonIdle, 1)
		s.Status.DrainSequence = 1
		s.Status.Drain = &lullv1.DrainRequest{RequestID: id, PodUID: pod.UID, Reason: lullv1.DrainReasonIdle, Sequence: 1, RequestedAt: metav1.NewTime(t0.Add(-time.Second))}
		reported := metav1.NewTime(t0.Add(-time.Second))
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, RequestID: id, State: lullv1.RuntimeDrained, LastActivity: &last, RefreshSeconds: 10, ReportedAt: &reported}
		s.Status.Lifecycle = &lullv1.LifecycleStatus{IdlePodUID: pod.UID, IdleSince: &last, IdleActivity: &last}
	})
	ctx := context.Background()
	tmpl := &lullv1.SessionTemplate{}
	if err := w.c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "agent"}, tmpl); err != nil {
		t.Fatal(err)
	}
	tmpl.Spec.Idle = &lullv1.IdlePolicy{SuspendAfter: &metav1.Duration{Duration: 30 * time.Minute}}
	tmpl.Spec.UpdatePolicy = lullv1.UpdatePolicy{DrainTimeout: &metav1.Duration{Duration: 5 * time.Minute}, OnDrainTimeout: lullv1.DrainTimeoutReplace}
	if err := w.c.Update(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	// The wave's place (sequence 1) was taken by the idle drain.
	for i := range 3 {
		w.clock.SetTime(t0.Add(time.Duration(i) * time.Second))
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	s := w.session()
	if d := s.Status.Drain; d == nil || d.Reason != lullv1.DrainReasonUpdate || d.Deadline == nil {
		t.Fatalf("drain %+v; want the update's request, with its deadline, in place of the idle drain", d)
	}
	if s.Status.Replacement != nil || len(w.deletes) != 0 || s.Spec.Suspend {
		t.Fatalf("replacement %+v, deletes %d, suspend %v: the runtime's Drained for the Idle request answered the Update request", s.Status.Replacement, len(w.deletes), s.Spec.Suspend)
	}
	// The runtime answers the Update request: committed, then deleted.
	s.Status.Runtime.RequestID, s.Status.Runtime.ReportedAt = s.Status.Drain.RequestID, &metav1.Time{Time: t0.Add(3 * time.Second)}
	if err := w.c.Status().Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	w.clock.SetTime(t0.Add(4 * time.Second))
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if len(w.deletes) != 1 || w.deletes[0].Preconditions == nil || *w.deletes[0].Preconditions.UID != w.podUID {
		t.Fatalf("deletes %+v; want the pod deleted on the Update answer", w.deletes)
	}
}

// A resume is a resume, whoever suspended. The idle cull's drained pod is
// committed; before the controller suspends the session, its user does
// (lull suspend, or kubectl), and then resumes it before the pod is scaled
// away. The controller must not suspend the session again for that cull:
// it replaces the committed pod, and the session runs on a new one.
func TestResumeAfterAUserSuspendDuringACommittedIdleCullIsNotUndone(t *testing.T) {
	w := committedIdleWorld(t, interceptor.Funcs{})
	ctx := context.Background()
	s := w.session()
	s.Spec.Suspend = true // the user's suspend, first
	if err := w.c.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	s = w.session()
	s.Spec.Suspend = false // lull resume, before the pod is scaled away
	if err := w.c.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		w.clock.SetTime(t0.Add(time.Duration(i+1) * time.Second))
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	if s := w.session(); s.Spec.Suspend {
		t.Fatal("the user resumed the session, and the controller suspended it again for the idle cull")
	}
	if len(w.deletes) != 1 || w.deletes[0].Preconditions == nil || *w.deletes[0].Preconditions.UID != w.podUID {
		t.Errorf("deletes %+v; want the committed pod replaced (UID precondition)", w.deletes)
	}
	n := map[string]int{}
	for _, r := range w.eventReasons() {
		n[r]++
	}
	if n["IdleSuspend"] != 0 {
		t.Errorf("events %v; the controller did not suspend the session: no IdleSuspend", n)
	}
}

// One RuntimeNotReporting Warning Event per episode: the status write that
// first says RuntimeNotReporting records it, and the writes after it in the
// same episode do not. A current pod ready for an hour whose runtime has no
// report of its own (status.runtime names the pod it replaced) is such an
// episode. (A commitment can no longer be that write: it needs a Drained
// report of the pod's own runtime, and the age of a report is not judged.)
func TestNotReportingIsRecordedOncePerEpisode(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, func(s *lullv1.Session, pod *corev1.Pod) {
		pod.Labels[appsv1.ControllerRevisionHashLabelKey] = "alice-new"
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))}}
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: "the-replaced-pod", State: lullv1.RuntimeDrained, RefreshSeconds: 10}
	})
	for i := range 2 {
		w.clock.SetTime(t0.Add(time.Duration(i) * time.Minute))
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	c := meta.FindStatusCondition(w.session().Status.Conditions, lullv1.ConditionActive)
	if c == nil || c.Reason != lullv1.ReasonRuntimeNotReporting {
		t.Fatalf("Active %+v: the pod has been ready an hour with no report of its own; want RuntimeNotReporting", c)
	}
	n := map[string]int{}
	for _, r := range w.eventReasons() {
		n[r]++
	}
	if n[lullv1.ReasonRuntimeNotReporting] != 1 {
		t.Errorf("events %v: two reconciles said Active=Unknown RuntimeNotReporting; want one Warning Event", n)
	}
}
