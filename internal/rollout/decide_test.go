package rollout

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

const (
	oldRev = "s-5f7c9"
	newRev = "s-6b8d1"
	podUID = types.UID("pod-1")
)

// fixture is one observed world; each table row edits a fresh copy.
type fixture struct{ o Observed }

func newFixture() *fixture {
	return &fixture{o: Observed{
		Now:      now,
		Strategy: lullv1.UpdateStrategyDrain,
		Session: &lullv1.Session{
			ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns", Generation: 1},
			Spec:       lullv1.SessionSpec{TemplateRef: lullv1.TemplateReference{Name: "t"}},
		},
		StatefulSet: &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: "s", Generation: 2},
			Status:     appsv1.StatefulSetStatus{ObservedGeneration: 2, UpdateRevision: newRev},
		},
		Pod: &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "s-0", UID: podUID, Labels: map[string]string{appsv1.ControllerRevisionHashLabelKey: oldRev}},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		},
	}}
}

func updateID(uid types.UID, rev string) string {
	return drain.RequestID(uid, lullv1.DrainReasonUpdate, rev)
}

func requested(uid types.UID, rev string, at time.Time) *lullv1.DrainRequest {
	return &lullv1.DrainRequest{RequestID: updateID(uid, rev), PodUID: uid, Reason: lullv1.DrainReasonUpdate, Revision: rev, RequestedAt: metav1.NewTime(at)}
}

func manual(uid types.UID, generation int64, at time.Time) *lullv1.DrainRequest {
	return &lullv1.DrainRequest{RequestID: drain.RequestID(uid, lullv1.DrainReasonManual, fmt.Sprint(generation)), PodUID: uid, Reason: lullv1.DrainReasonManual, RequestedAt: metav1.NewTime(at)}
}

func report(uid types.UID, id string, state lullv1.RuntimeState, active int32) *lullv1.RuntimeReport {
	return &lullv1.RuntimeReport{PodUID: uid, RequestID: id, State: state, ActiveTurns: active}
}

func waiting(reason string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: "runtime", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}
}

func TestDecide(t *testing.T) {
	earlier := now.Add(-time.Minute)
	tests := []struct {
		name  string
		edit  func(o *Observed)
		kind  Kind
		why   string
		drain func() *lullv1.DrainRequest // expected Action.Drain; nil func means nil
		after time.Duration               // expected RequeueAfter
	}{
		{name: "suspended session without a pod waits", edit: func(o *Observed) { o.Session.Spec.Suspend = true; o.Pod = nil }, kind: Wait, why: ReasonSuspended},
		{name: "suspending a session drains its pod first",
			edit: func(o *Observed) { o.Session.Spec.Suspend = true },
			kind: RequestDrain, why: ReasonDrainRequested, drain: func() *lullv1.DrainRequest { return manual(podUID, 1, now) }},
		{name: "suspending waits for the drain",
			edit: func(o *Observed) {
				o.Session.Spec.Suspend = true
				o.Session.Status.Drain = manual(podUID, 1, earlier)
				o.Session.Status.Runtime = report(podUID, manual(podUID, 1, earlier).RequestID, lullv1.RuntimeDraining, 1)
			}, kind: Wait, why: ReasonSuspending, drain: func() *lullv1.DrainRequest { return manual(podUID, 1, earlier) }},
		{name: "suspending a stale pod drains for the suspension, not the update",
			edit: func(o *Observed) {
				o.Session.Spec.Suspend = true
				o.Session.Status.Drain = requested(podUID, newRev, earlier)
			}, kind: RequestDrain, why: ReasonDrainRequested, drain: func() *lullv1.DrainRequest { return manual(podUID, 1, now) }},
		{name: "drained suspended session is scaled away",
			edit: func(o *Observed) {
				o.Session.Spec.Suspend = true
				o.Session.Status.Drain = manual(podUID, 1, earlier)
				o.Session.Status.Runtime = report(podUID, manual(podUID, 1, earlier).RequestID, lullv1.RuntimeDrained, 0)
			}, kind: Wait, why: ReasonSuspending, drain: func() *lullv1.DrainRequest { return manual(podUID, 1, earlier) }},
		{name: "no StatefulSet yet", edit: func(o *Observed) { o.StatefulSet = nil }, kind: Wait, why: ReasonStatefulSetPending},
		{name: "StatefulSet generation not observed yet triggers nothing",
			edit: func(o *Observed) { o.StatefulSet.Status.ObservedGeneration = 1 }, kind: Wait, why: ReasonRevisionUnknown},
		{name: "brand-new StatefulSet without update revision triggers nothing",
			edit: func(o *Observed) { o.StatefulSet.Status = appsv1.StatefulSetStatus{ObservedGeneration: 2} }, kind: Wait, why: ReasonRevisionUnknown},
		{name: "revision unknown keeps an outstanding request",
			edit: func(o *Observed) {
				o.StatefulSet.Status.ObservedGeneration = 1
				o.Session.Status.Drain = requested(podUID, newRev, earlier)
			}, kind: Wait, why: ReasonRevisionUnknown, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, earlier) }},
		{name: "no pod yet", edit: func(o *Observed) { o.Pod = nil }, kind: Wait, why: ReasonPodPending},
		{name: "terminating pod is waited for",
			edit: func(o *Observed) { ts := metav1.NewTime(earlier); o.Pod.DeletionTimestamp = &ts }, kind: Wait, why: ReasonPodTerminating},
		{name: "current pod is up to date and clears a leftover request",
			edit: func(o *Observed) {
				o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = newRev
				o.Session.Status.Drain = requested(podUID, newRev, earlier)
			}, kind: Wait, why: ReasonUpToDate},
		{name: "image rewritten after admission but revision current is not drained",
			edit: func(o *Observed) {
				o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = newRev
				o.Pod.Spec.Containers = []corev1.Container{{Name: "runtime", Image: "mirror.example/rewritten@sha256:abc"}}
			}, kind: Wait, why: ReasonUpToDate},
		{name: "current pod that keeps failing is never deleted",
			edit: func(o *Observed) {
				o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = newRev
				o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("CrashLoopBackOff")}
			}, kind: Wait, why: ReasonUpToDate},
		{name: "stale terminal pod is replaced at once",
			edit: func(o *Observed) { o.Pod.Status.Phase = corev1.PodFailed }, kind: DeletePod, why: ReasonPodFailed},
		{name: "stale succeeded pod is replaced at once",
			edit: func(o *Observed) { o.Pod.Status.Phase = corev1.PodSucceeded }, kind: DeletePod, why: ReasonPodFailed},
		{name: "stale pod in ImagePullBackOff is replaced at once",
			edit: func(o *Observed) {
				o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("ImagePullBackOff")}
			}, kind: DeletePod, why: ReasonPodFailed},
		{name: "stale pod with a failing init container is replaced",
			edit: func(o *Observed) {
				o.Pod.Status.InitContainerStatuses = []corev1.ContainerStatus{waiting("CreateContainerConfigError")}
			}, kind: DeletePod, why: ReasonPodFailed},
		{name: "stale pod merely creating its container is drained, not replaced",
			edit: func(o *Observed) {
				o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("ContainerCreating")}
			},
			kind: RequestDrain, why: ReasonDrainRequested, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, now) }},
		{name: "failed stale pod inside the backoff waits",
			edit: func(o *Observed) {
				o.Pod.Status.Phase = corev1.PodFailed
				o.Session.Status.FailedReplacements = 2 // backoff 10 s
				last := metav1.NewTime(now.Add(-4 * time.Second))
				o.Session.Status.LastFailedReplacementTime = &last
			}, kind: Wait, why: ReasonReplacementBackoff, after: 6 * time.Second},
		{name: "failed stale pod after the backoff is replaced",
			edit: func(o *Observed) {
				o.Pod.Status.Phase = corev1.PodFailed
				o.Session.Status.FailedReplacements = 2
				last := metav1.NewTime(now.Add(-11 * time.Second))
				o.Session.Status.LastFailedReplacementTime = &last
			}, kind: DeletePod, why: ReasonPodFailed},
		{name: "force-update true replaces a stale pod without a drain",
			edit: func(o *Observed) { o.Session.Annotations = map[string]string{lullv1.AnnotationForceUpdate: "true"} },
			kind: DeletePod, why: ReasonForced, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, now) }},
		{name: "force-update with the exact request ID replaces the pod",
			edit: func(o *Observed) {
				o.Session.Status.Drain = requested(podUID, newRev, earlier)
				o.Session.Annotations = map[string]string{lullv1.AnnotationForceUpdate: updateID(podUID, newRev)}
			}, kind: DeletePod, why: ReasonForced, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, earlier) }},
		{name: "force-update with another request ID is ignored",
			edit: func(o *Observed) {
				o.Session.Status.Drain = requested(podUID, newRev, earlier)
				o.Session.Annotations = map[string]string{lullv1.AnnotationForceUpdate: updateID("pod-0", newRev)}
			}, kind: Wait, why: ReasonDraining, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, earlier) }},
		{name: "force-update does not touch a current pod",
			edit: func(o *Observed) {
				o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = newRev
				o.Session.Annotations = map[string]string{lullv1.AnnotationForceUpdate: "true"}
			}, kind: Wait, why: ReasonUpToDate},
		{name: "stale healthy pod gets a drain request",
			kind: RequestDrain, why: ReasonDrainRequested, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, now) }},
		{name: "request for an older revision is replaced by a new episode",
			edit: func(o *Observed) { o.Session.Status.Drain = requested(podUID, "s-older", earlier) },
			kind: RequestDrain, why: ReasonDrainRequested, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, now) }},
		{name: "request for a previous pod is replaced by one for this pod",
			edit: func(o *Observed) { o.Session.Status.Drain = requested("pod-0", newRev, earlier) },
			kind: RequestDrain, why: ReasonDrainRequested, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, now) }},
		{name: "outstanding request without a report waits",
			edit: func(o *Observed) { o.Session.Status.Drain = requested(podUID, newRev, earlier) },
			kind: Wait, why: ReasonDraining, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, earlier) }},
		{name: "runtime still draining waits",
			edit: func(o *Observed) {
				o.Session.Status.Drain = requested(podUID, newRev, earlier)
				o.Session.Status.Runtime = report(podUID, updateID(podUID, newRev), lullv1.RuntimeDraining, 2)
			}, kind: Wait, why: ReasonDraining, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, earlier) }},
		{name: "matching Drained report deletes the pod",
			edit: func(o *Observed) {
				o.Session.Status.Drain = requested(podUID, newRev, earlier)
				o.Session.Status.Runtime = report(podUID, updateID(podUID, newRev), lullv1.RuntimeDrained, 0)
			}, kind: DeletePod, why: ReasonDrained, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, earlier) }},
		{name: "Drained report with a wrong request ID deletes nothing",
			edit: func(o *Observed) {
				o.Session.Status.Drain = requested(podUID, newRev, earlier)
				o.Session.Status.Runtime = report(podUID, updateID(podUID, "s-older"), lullv1.RuntimeDrained, 0)
			}, kind: Wait, why: ReasonDraining, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, earlier) }},
		{name: "Drained report from the old pod after the pod was recreated deletes nothing",
			edit: func(o *Observed) {
				o.Pod.UID = "pod-2"
				o.Session.Status.Drain = requested(podUID, newRev, earlier)
				o.Session.Status.Runtime = report(podUID, updateID(podUID, newRev), lullv1.RuntimeDrained, 0)
			}, kind: RequestDrain, why: ReasonDrainRequested, drain: func() *lullv1.DrainRequest { return requested("pod-2", newRev, now) }},
		{name: "malformed Drained report (turns still active) deletes nothing",
			edit: func(o *Observed) {
				o.Session.Status.Drain = requested(podUID, newRev, earlier)
				o.Session.Status.Runtime = report(podUID, updateID(podUID, newRev), lullv1.RuntimeDrained, 1)
			}, kind: Wait, why: ReasonDraining, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, earlier) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture()
			if tt.edit != nil {
				tt.edit(&f.o)
			}
			a := Decide(f.o)
			if a.Kind != tt.kind || a.Reason != tt.why {
				t.Fatalf("Decide = %s/%s (%s), want %s/%s", a.Kind, a.Reason, a.Message, tt.kind, tt.why)
			}
			var want *lullv1.DrainRequest
			if tt.drain != nil {
				want = tt.drain()
			}
			switch {
			case want == nil && a.Drain != nil:
				t.Errorf("Drain = %+v, want none", a.Drain)
			case want != nil && (a.Drain == nil || *a.Drain != *want):
				t.Errorf("Drain = %+v, want %+v", a.Drain, want)
			}
			if a.Kind == DeletePod && a.PodUID != f.o.Pod.UID {
				t.Errorf("DeletePod precondition UID = %q, want the observed pod's %q", a.PodUID, f.o.Pod.UID)
			}
			if a.RequeueAfter != tt.after {
				t.Errorf("RequeueAfter = %s, want %s", a.RequeueAfter, tt.after)
			}
			if a.Message == "" {
				t.Error("Message is empty")
			}
		})
	}
}

// A restarted controller that observes the same pod and revision must
// recompute the same request, byte for byte, whatever the clock says.
func TestDecideIsStableAcrossRestarts(t *testing.T) {
	f := newFixture()
	first := Decide(f.o)
	f.o.Session.Status.Drain = first.Drain
	f.o.Now = now.Add(time.Hour)
	again := Decide(f.o)
	if again.Kind != Wait || *again.Drain != *first.Drain {
		t.Fatalf("after restart: %s with %+v, want Wait keeping %+v", again.Kind, again.Drain, first.Drain)
	}
}

// A suspended session keeps its pod until the runtime has answered the
// suspension's drain request (or cannot drain); then it is scaled to zero.
func TestReplicas(t *testing.T) {
	id := manual(podUID, 1, now).RequestID
	tests := []struct {
		name string
		edit func(o *Observed)
		want int32
	}{
		{"running session", func(o *Observed) {}, 1},
		{"suspended, pod draining", func(o *Observed) {
			o.Session.Spec.Suspend = true
			o.Session.Status.Drain = manual(podUID, 1, now)
			o.Session.Status.Runtime = report(podUID, id, lullv1.RuntimeDraining, 1)
		}, 1},
		{"suspended, no drain request yet", func(o *Observed) { o.Session.Spec.Suspend = true }, 1},
		{"suspended, drained", func(o *Observed) {
			o.Session.Spec.Suspend = true
			o.Session.Status.Drain = manual(podUID, 1, now)
			o.Session.Status.Runtime = report(podUID, id, lullv1.RuntimeDrained, 0)
		}, 0},
		{"suspended, Drained for an earlier suspension", func(o *Observed) {
			o.Session.Spec.Suspend = true
			o.Session.Generation = 3
			o.Session.Status.Drain = manual(podUID, 1, now)
			o.Session.Status.Runtime = report(podUID, id, lullv1.RuntimeDrained, 0)
		}, 1},
		{"suspended, Drained for the update, not the suspension", func(o *Observed) {
			o.Session.Spec.Suspend = true
			o.Session.Status.Drain = requested(podUID, newRev, now)
			o.Session.Status.Runtime = report(podUID, updateID(podUID, newRev), lullv1.RuntimeDrained, 0)
		}, 1},
		{"suspended, pod failed", func(o *Observed) { o.Session.Spec.Suspend = true; o.Pod.Status.Phase = corev1.PodFailed }, 0},
		{"suspended, force-update true", func(o *Observed) {
			o.Session.Spec.Suspend = true
			o.Session.Annotations = map[string]string{lullv1.AnnotationForceUpdate: "true"}
		}, 0},
		{"suspended, no pod", func(o *Observed) { o.Session.Spec.Suspend = true; o.Pod = nil }, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture()
			tt.edit(&f.o)
			if got := Replicas(f.o); got != tt.want {
				t.Errorf("Replicas = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	for n, want := range map[int32]time.Duration{0: 0, 1: 5 * time.Second, 2: 10 * time.Second, 3: 20 * time.Second, 7: 5 * time.Minute, 50: 5 * time.Minute} {
		if got := Backoff(n); got != want {
			t.Errorf("Backoff(%d) = %s, want %s", n, got, want)
		}
	}
}

func TestNextStatus(t *testing.T) {
	t.Run("drain requested", func(t *testing.T) {
		f := newFixture()
		f.o.Session.Status.Runtime = report(podUID, "", lullv1.RuntimeServing, 1)
		a := Decide(f.o)
		st := NextStatus(f.o, a)
		if st.Phase != lullv1.SessionDraining || st.Drain == nil || st.CurrentRevision != oldRev || st.UpdateRevision != newRev {
			t.Fatalf("status = %+v", st)
		}
		assertCondition(t, st, lullv1.ConditionUpToDate, metav1.ConditionFalse, ReasonDraining)
		f.o.Session.Status = st
		again := NextStatus(f.o, Decide(f.o))
		if !equality.Semantic.DeepEqual(again, st) {
			t.Errorf("waiting for the drain changed the status:\n%+v\nwas\n%+v", again, st)
		}
		assertCondition(t, st, lullv1.ConditionDraining, metav1.ConditionTrue, string(lullv1.DrainReasonUpdate))
		assertCondition(t, st, lullv1.ConditionActive, metav1.ConditionTrue, "TurnsInFlight")
		assertCondition(t, st, lullv1.ConditionReady, metav1.ConditionTrue, "PodReady")
		if st.Runtime == nil || st.Runtime.ActiveTurns != 1 {
			t.Errorf("runtime report changed: %+v", st.Runtime)
		}
	})
	t.Run("up to date resets the failure count", func(t *testing.T) {
		f := newFixture()
		f.o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = newRev
		f.o.Session.Status.FailedReplacements = 3
		st := NextStatus(f.o, Decide(f.o))
		if st.Phase != lullv1.SessionRunning || st.FailedReplacements != 0 || st.Drain != nil {
			t.Fatalf("status = %+v", st)
		}
		assertCondition(t, st, lullv1.ConditionUpToDate, metav1.ConditionTrue, ReasonUpToDate)
		assertCondition(t, st, lullv1.ConditionActive, metav1.ConditionUnknown, "NoReport")
	})
	t.Run("failed replacement counts toward backoff", func(t *testing.T) {
		f := newFixture()
		f.o.Pod.Status.Phase = corev1.PodFailed
		a := Decide(f.o)
		st := NextStatus(f.o, a)
		if st.FailedReplacements != 1 || st.LastFailedReplacementTime == nil || !st.LastFailedReplacementTime.Time.Equal(now) || st.Phase != lullv1.SessionPending {
			t.Fatalf("status = %+v", st)
		}
	})
	t.Run("current failing pod shows Failed", func(t *testing.T) {
		f := newFixture()
		f.o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = newRev
		f.o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("CrashLoopBackOff")}
		st := NextStatus(f.o, Decide(f.o))
		if st.Phase != lullv1.SessionFailed {
			t.Fatalf("phase = %s", st.Phase)
		}
		assertCondition(t, st, lullv1.ConditionReady, metav1.ConditionFalse, ReasonPodFailed)
	})
	t.Run("transition time moves only when status changes", func(t *testing.T) {
		f := newFixture()
		st := NextStatus(f.o, Decide(f.o))
		f.o.Session.Status = st
		f.o.Now = now.Add(time.Minute)
		again := NextStatus(f.o, Decide(f.o))
		for _, c := range again.Conditions {
			if !c.LastTransitionTime.Time.Equal(now) {
				t.Errorf("%s transition time moved to %s", c.Type, c.LastTransitionTime)
			}
		}
	})
}

func assertCondition(t *testing.T, st lullv1.SessionStatus, typ string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	for _, c := range st.Conditions {
		if c.Type == typ {
			if c.Status != status || c.Reason != reason {
				t.Errorf("%s = %s/%s (%s), want %s/%s", typ, c.Status, c.Reason, c.Message, status, reason)
			}
			if strings.TrimSpace(c.Message) == "" {
				t.Errorf("%s has no message", typ)
			}
			return
		}
	}
	t.Errorf("no %s condition in %+v", typ, st.Conditions)
}
