package rollout

import (
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

// decide is Decide with the judgement the reconciler passes it: Judge of
// the same observation.
func decide(o Observed) Action { return Decide(o, Judge(o)) }

// nextStatus is NextStatus with the judgement the reconciler passes it.
func nextStatus(o Observed, a Action) lullv1.SessionStatus { return NextStatus(o, Judge(o), a) }

// fixture is one observed world; each table row edits a fresh copy.
type fixture struct{ o Observed }

func newFixture() *fixture {
	return &fixture{o: Observed{
		Now:      now,
		Policy:   lullv1.UpdatePolicy{Strategy: lullv1.UpdateStrategyDrain},
		Admitted: true,
		Session: &lullv1.Session{
			ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns", Generation: 1},
			Spec:       lullv1.SessionSpec{TemplateRef: lullv1.TemplateReference{Name: "t"}},
		},
		StatefulSet: &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: "s", Generation: 2},
			Status:     appsv1.StatefulSetStatus{ObservedGeneration: 2, UpdateRevision: newRev},
		},
		Pod: &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "s-0", UID: podUID, ResourceVersion: "41", Labels: map[string]string{appsv1.ControllerRevisionHashLabelKey: oldRev}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
				ContainerStatuses: []corev1.ContainerStatus{running(lullv1.RuntimeContainerName)}},
		},
	}}
}

// requested is an Update request for rev issued with drain sequence seq.
func requested(uid types.UID, rev string, seq int64, at time.Time) *lullv1.DrainRequest {
	return &lullv1.DrainRequest{RequestID: drain.RequestID(uid, lullv1.DrainReasonUpdate, seq), PodUID: uid, Reason: lullv1.DrainReasonUpdate,
		Revision: rev, Sequence: seq, RequestedAt: metav1.NewTime(at)}
}

// withDeadline returns d with the given deadline.
func withDeadline(d *lullv1.DrainRequest, at time.Time) *lullv1.DrainRequest {
	t := metav1.NewTime(at)
	d.Deadline = &t
	return d
}

// manual is the Manual request of a suspension issued with sequence seq.
func manual(uid types.UID, seq int64, at time.Time) *lullv1.DrainRequest {
	return &lullv1.DrainRequest{RequestID: drain.RequestID(uid, lullv1.DrainReasonManual, seq), PodUID: uid, Reason: lullv1.DrainReasonManual,
		Sequence: seq, RequestedAt: metav1.NewTime(at)}
}

// outstanding puts d in status.drain, as the controller's write of it did
// (with the drain sequence it took).
func outstanding(o *Observed, d *lullv1.DrainRequest) {
	o.Session.Status.Drain = d
	o.Session.Status.DrainSequence = max(o.Session.Status.DrainSequence, d.Sequence)
}

func committed(uid types.UID, reason lullv1.ReplacementReason, requestID string) *lullv1.Replacement {
	return &lullv1.Replacement{PodUID: uid, Reason: reason, RequestID: requestID, CommittedAt: metav1.NewTime(now)}
}

func report(uid types.UID, id string, state lullv1.RuntimeState, active int32) *lullv1.RuntimeReport {
	return &lullv1.RuntimeReport{PodUID: uid, RequestID: id, State: state, ActiveTurns: active}
}

func waiting(reason string) corev1.ContainerStatus {
	return waitingIn(lullv1.RuntimeContainerName, reason)
}

func waitingIn(container, reason string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: container, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}
}

func running(container string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: container, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
}

// decideCase is one row of a Decide table: a world edited from the
// fixture, and the step expected of it.
type decideCase struct {
	name   string
	edit   func(o *Observed)
	kind   Kind
	why    string
	drain  func() *lullv1.DrainRequest // expected Action.Drain; nil func means nil
	commit *lullv1.Replacement         // expected Action.Replacement
	after  time.Duration               // expected RequeueAfter
}

// runDecideTable runs each row against a fresh fixture.
func runDecideTable(t *testing.T, tests []decideCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture()
			if tt.edit != nil {
				tt.edit(&f.o)
			}
			a := decide(f.o)
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
			case want != nil && !equality.Semantic.DeepEqual(a.Drain, want):
				t.Errorf("Drain = %+v, want %+v", a.Drain, want)
			}
			if !equality.Semantic.DeepEqual(a.Replacement, tt.commit) {
				t.Errorf("Replacement = %+v, want %+v", a.Replacement, tt.commit)
			}
			if (a.Kind == DeletePod || a.Kind == Commit) && a.PodUID != f.o.Pod.UID {
				t.Errorf("DeletePod precondition UID = %q, want the observed pod's %q", a.PodUID, f.o.Pod.UID)
			}
			if c := f.o.Session.Status.Replacement; a.Kind == DeletePod && (c == nil || c.PodUID != a.PodUID) {
				t.Errorf("DeletePod of pod %s whose replacement is not committed (status.replacement %+v): every destructive step is a Commit first", a.PodUID, c)
			}
			if a.RequeueAfter != tt.after {
				t.Errorf("RequeueAfter = %s, want %s", a.RequeueAfter, tt.after)
			}
			if a.Message == "" {
				t.Error("Message is empty")
			}
			// A wait reads the same a moment later while it lasts: the
			// message is status, and one that counted down would be a
			// status write on every reconcile.
			// (A wait that changes the request, e.g. adds a deadline
			// counted from now, writes once and is then stable.)
			if a.Kind == Wait && equality.Semantic.DeepEqual(a.Drain, f.o.Session.Status.Drain) {
				later := f.o
				later.Now = f.o.Now.Add(1500 * time.Millisecond)
				if b := decide(later); b.Kind == a.Kind && b.Reason == a.Reason && b.Message != a.Message {
					t.Errorf("message changes with the clock alone:\n  %s\n  %s", a.Message, b.Message)
				}
			}
		})
	}
}

func TestDecide(t *testing.T) {
	earlier := now.Add(-time.Minute)
	tests := []decideCase{
		// Suspension.
		{name: "suspended session without a pod waits", edit: func(o *Observed) { o.Session.Spec.Suspend = true; o.Pod = nil }, kind: Wait, why: lullv1.ReasonSuspended},
		{name: "suspending a session drains its pod first",
			edit: func(o *Observed) { o.Session.Spec.Suspend = true },
			kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: func() *lullv1.DrainRequest { return manual(podUID, 1, now) }},
		{name: "suspending waits for the drain",
			edit: func(o *Observed) {
				o.Session.Spec.Suspend = true
				outstanding(o, manual(podUID, 1, earlier))
				o.Session.Status.Runtime = report(podUID, manual(podUID, 1, earlier).RequestID, lullv1.RuntimeDraining, 1)
			}, kind: Wait, why: lullv1.ReasonSuspending, drain: func() *lullv1.DrainRequest { return manual(podUID, 1, earlier) }},
		{name: "suspending a stale pod drains for the suspension with a new ID",
			edit: func(o *Observed) {
				o.Session.Spec.Suspend = true
				outstanding(o, requested(podUID, newRev, 1, earlier))
			}, kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: func() *lullv1.DrainRequest { return manual(podUID, 2, now) }},
		{name: "a drained suspended session commits before it is scaled away",
			edit: func(o *Observed) {
				o.Session.Spec.Suspend = true
				outstanding(o, manual(podUID, 1, earlier))
				o.Session.Status.Runtime = report(podUID, manual(podUID, 1, earlier).RequestID, lullv1.RuntimeDrained, 0)
			}, kind: Commit, why: lullv1.ReasonDrained, drain: func() *lullv1.DrainRequest { return manual(podUID, 1, earlier) },
			commit: committed(podUID, lullv1.ReplacementDrained, manual(podUID, 1, earlier).RequestID)},
		{name: "a committed suspended session is scaled away, its request kept",
			edit: func(o *Observed) {
				o.Session.Spec.Suspend = true
				outstanding(o, manual(podUID, 1, earlier))
				o.Session.Status.Replacement = committed(podUID, lullv1.ReplacementDrained, manual(podUID, 1, earlier).RequestID)
			}, kind: Wait, why: lullv1.ReasonSuspending, drain: func() *lullv1.DrainRequest { return manual(podUID, 1, earlier) },
			commit: committed(podUID, lullv1.ReplacementDrained, manual(podUID, 1, earlier).RequestID)},
		{name: "a suspended failed pod is committed as observed, without backoff (then scaled away)",
			edit: func(o *Observed) {
				o.Session.Spec.Suspend = true
				o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("CrashLoopBackOff")}
				o.Session.Status.FailedReplacements = 3
				last := metav1.NewTime(now)
				o.Session.Status.LastFailedReplacementTime = &last
			}, kind: Commit, why: lullv1.ReasonPodFailed, commit: committed(podUID, lullv1.ReplacementPodFailed, "")},
		{name: "force-update true on a suspended session commits before it is scaled away",
			edit: func(o *Observed) {
				o.Session.Spec.Suspend = true
				outstanding(o, manual(podUID, 1, earlier))
				o.Session.Annotations = map[string]string{lullv1.AnnotationForceUpdate: "true"}
			}, kind: Commit, why: lullv1.ReasonForced, drain: func() *lullv1.DrainRequest { return manual(podUID, 1, earlier) },
			commit: committed(podUID, lullv1.ReplacementForced, manual(podUID, 1, earlier).RequestID)},
		{name: "a forced suspension, committed, is scaled away",
			edit: func(o *Observed) {
				o.Session.Spec.Suspend = true
				o.Session.Status.Replacement = committed(podUID, lullv1.ReplacementForced, "")
			}, kind: Wait, why: lullv1.ReasonSuspending, commit: committed(podUID, lullv1.ReplacementForced, "")},
		{name: "a suspended pod with a failing sidecar is drained, not scaled away",
			edit: func(o *Observed) {
				o.Session.Spec.Suspend = true
				o.Pod.Status.ContainerStatuses = append(o.Pod.Status.ContainerStatuses, waitingIn("mesh-proxy", "CrashLoopBackOff"))
			}, kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: func() *lullv1.DrainRequest { return manual(podUID, 1, now) }},

		// Observation gates.
		{name: "no StatefulSet yet", edit: func(o *Observed) { o.StatefulSet = nil }, kind: Wait, why: lullv1.ReasonStatefulSetPending},
		{name: "StatefulSet generation not observed yet triggers nothing",
			edit: func(o *Observed) { o.StatefulSet.Status.ObservedGeneration = 1 }, kind: Wait, why: lullv1.ReasonRevisionUnknown},
		{name: "brand-new StatefulSet without update revision triggers nothing",
			edit: func(o *Observed) { o.StatefulSet.Status = appsv1.StatefulSetStatus{ObservedGeneration: 2} }, kind: Wait, why: lullv1.ReasonRevisionUnknown},
		{name: "revision unknown keeps an outstanding request",
			edit: func(o *Observed) {
				o.StatefulSet.Status.ObservedGeneration = 1
				outstanding(o, requested(podUID, newRev, 1, earlier))
			}, kind: Wait, why: lullv1.ReasonRevisionUnknown, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, 1, earlier) }},
		{name: "no pod yet", edit: func(o *Observed) { o.Pod = nil }, kind: Wait, why: lullv1.ReasonPodPending},
		{name: "terminating pod is waited for, looked at again when it would be stuck",
			edit: func(o *Observed) { ts := metav1.NewTime(now.Add(-10 * time.Second)); o.Pod.DeletionTimestamp = &ts },
			kind: Wait, why: lullv1.ReasonPodTerminating, after: StuckTerminatingAfter - 10*time.Second + time.Second},
		{name: "pod terminating long past its grace period is named stuck",
			edit: func(o *Observed) {
				ts := metav1.NewTime(now.Add(-StuckTerminatingAfter - time.Second))
				o.Pod.DeletionTimestamp = &ts
				o.Pod.Finalizers = []string{"example.com/hold"}
				o.Pod.Spec.NodeName = "node-7"
			}, kind: Wait, why: lullv1.ReasonPodStuckTerminating},

		// Current pods.
		{name: "current pod is up to date and clears a leftover request",
			edit: func(o *Observed) {
				o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = newRev
				outstanding(o, requested(podUID, newRev, 1, earlier))
			}, kind: Wait, why: lullv1.ReasonUpToDate},
		{name: "image rewritten after admission but revision current is not drained",
			edit: func(o *Observed) {
				o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = newRev
				o.Pod.Spec.Containers = []corev1.Container{{Name: "runtime", Image: "mirror.example/rewritten@sha256:abc"}}
			}, kind: Wait, why: lullv1.ReasonUpToDate},
		{name: "current pod that keeps failing is never deleted",
			edit: func(o *Observed) {
				o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = newRev
				o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("CrashLoopBackOff")}
			}, kind: Wait, why: lullv1.ReasonUpToDate},

		// Stale pods that cannot serve.
		{name: "stale terminal pod is committed and deleted as observed",
			edit: func(o *Observed) { o.Pod.Status.Phase = corev1.PodFailed },
			kind: Commit, why: lullv1.ReasonPodFailed, commit: committed(podUID, lullv1.ReplacementPodFailed, "")},
		{name: "stale succeeded pod is replaced at once",
			edit: func(o *Observed) { o.Pod.Status.Phase = corev1.PodSucceeded },
			kind: Commit, why: lullv1.ReasonPodFailed, commit: committed(podUID, lullv1.ReplacementPodFailed, "")},
		{name: "stale pod whose runtime is in ImagePullBackOff is replaced at once",
			edit: func(o *Observed) {
				o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("ImagePullBackOff")}
			},
			kind: Commit, why: lullv1.ReasonPodFailed, commit: committed(podUID, lullv1.ReplacementPodFailed, "")},
		{name: "a crash-looping sidecar next to a running runtime is drained, not deleted",
			edit: func(o *Observed) {
				o.Pod.Status.ContainerStatuses = append(o.Pod.Status.ContainerStatuses, waitingIn("mesh-proxy", "CrashLoopBackOff"))
				o.Session.Status.Runtime = report(podUID, "", lullv1.RuntimeServing, 2)
			}, kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, 1, now) }},
		{name: "a native sidecar in ImagePullBackOff next to a running runtime is drained, not deleted",
			edit: func(o *Observed) {
				o.Pod.Status.InitContainerStatuses = []corev1.ContainerStatus{waitingIn("proxy", "ImagePullBackOff")}
			}, kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, 1, now) }},
		{name: "stale pod whose runtime is still being created has never started: replaced without a drain",
			edit: func(o *Observed) {
				o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("ContainerCreating")}
			},
			kind: Commit, why: lullv1.ReasonNeverStarted, commit: committed(podUID, lullv1.ReplacementNeverStarted, "")},
		{name: "unschedulable stale pod is replaced without a drain",
			edit: func(o *Observed) {
				o.Pod.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/3 nodes have enough memory"}}}
			}, kind: Commit, why: lullv1.ReasonNeverStarted, commit: committed(podUID, lullv1.ReplacementNeverStarted, "")},
		{name: "stale pod held by a failing init container has never started",
			edit: func(o *Observed) {
				o.Pod.Status = corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{waitingIn("setup", "CreateContainerConfigError")},
					ContainerStatuses: []corev1.ContainerStatus{waiting("PodInitializing")}}
			}, kind: Commit, why: lullv1.ReasonNeverStarted, commit: committed(podUID, lullv1.ReplacementNeverStarted, "")},
		{name: "a pending-looking pod whose runtime has reported is drained (kubelet status lag)",
			edit: func(o *Observed) {
				o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("ContainerCreating")}
				o.Session.Status.Runtime = report(podUID, "", lullv1.RuntimeServing, 1)
			}, kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, 1, now) }},
		{name: "a runtime container that ran before is not never-started",
			edit: func(o *Observed) {
				c := waiting("ContainerCreating")
				c.RestartCount = 1
				o.Pod.Status.ContainerStatuses = []corev1.ContainerStatus{c}
			}, kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, 1, now) }},
		{name: "failed stale pod inside the backoff waits",
			edit: func(o *Observed) {
				o.Pod.Status.Phase = corev1.PodFailed
				o.Session.Status.FailedReplacements = 2 // backoff 10 s
				last := metav1.NewTime(now.Add(-4 * time.Second))
				o.Session.Status.LastFailedReplacementTime = &last
			}, kind: Wait, why: lullv1.ReasonReplacementBackoff, after: 6 * time.Second},
		{name: "never-started stale pod inside the backoff waits",
			edit: func(o *Observed) {
				o.Pod.Status = corev1.PodStatus{Phase: corev1.PodPending}
				o.Session.Status.FailedReplacements = 1
				last := metav1.NewTime(now.Add(-1 * time.Second))
				o.Session.Status.LastFailedReplacementTime = &last
			}, kind: Wait, why: lullv1.ReasonReplacementBackoff, after: 4 * time.Second},
		{name: "failed stale pod after the backoff is committed",
			edit: func(o *Observed) {
				o.Pod.Status.Phase = corev1.PodFailed
				o.Session.Status.FailedReplacements = 2
				last := metav1.NewTime(now.Add(-11 * time.Second))
				o.Session.Status.LastFailedReplacementTime = &last
			}, kind: Commit, why: lullv1.ReasonPodFailed, commit: committed(podUID, lullv1.ReplacementPodFailed, "")},

		// Committed replacements.
		{name: "a committed failure is deleted, not counted again",
			edit: func(o *Observed) {
				o.Pod.Status.Phase = corev1.PodFailed
				o.Session.Status.Replacement = committed(podUID, lullv1.ReplacementPodFailed, "")
				o.Session.Status.FailedReplacements = 1
				last := metav1.NewTime(now)
				o.Session.Status.LastFailedReplacementTime = &last
			}, kind: DeletePod, why: string(lullv1.ReplacementPodFailed), commit: committed(podUID, lullv1.ReplacementPodFailed, "")},
		{name: "a committed failure whose pod recovered is still deleted (its runtime holds)",
			edit: func(o *Observed) {
				o.Session.Status.Replacement = committed(podUID, lullv1.ReplacementPodFailed, "")
			}, kind: DeletePod, why: string(lullv1.ReplacementPodFailed), commit: committed(podUID, lullv1.ReplacementPodFailed, "")},
		{name: "a committed never-started pod whose runtime has reported since is still deleted (its runtime holds)",
			edit: func(o *Observed) {
				o.Session.Status.Replacement = committed(podUID, lullv1.ReplacementNeverStarted, "")
				o.Session.Status.Runtime = report(podUID, "", lullv1.RuntimeServing, 0)
			}, kind: DeletePod, why: string(lullv1.ReplacementNeverStarted), commit: committed(podUID, lullv1.ReplacementNeverStarted, "")},
		{name: "a committed drained pod is deleted even after a rollback made it current",
			edit: func(o *Observed) {
				o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = newRev
				outstanding(o, requested(podUID, "s-older", 3, earlier))
				o.Session.Status.Replacement = committed(podUID, lullv1.ReplacementDrained, requested(podUID, "s-older", 3, earlier).RequestID)
			}, kind: DeletePod, why: lullv1.ReasonDrained, drain: func() *lullv1.DrainRequest { return requested(podUID, "s-older", 3, earlier) },
			commit: committed(podUID, lullv1.ReplacementDrained, requested(podUID, "s-older", 3, earlier).RequestID)},
		{name: "a committed drained pod is deleted while the StatefulSet revision is unknown",
			edit: func(o *Observed) {
				o.StatefulSet.Status.ObservedGeneration = 1
				outstanding(o, requested(podUID, newRev, 1, earlier))
				o.Session.Status.Replacement = committed(podUID, lullv1.ReplacementDrained, requested(podUID, newRev, 1, earlier).RequestID)
			}, kind: DeletePod, why: lullv1.ReasonDrained, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, 1, earlier) },
			commit: committed(podUID, lullv1.ReplacementDrained, requested(podUID, newRev, 1, earlier).RequestID)},
		{name: "a commitment for a previous pod is dropped",
			edit: func(o *Observed) {
				o.Session.Status.Replacement = committed("pod-0", lullv1.ReplacementDrained, "update-0000000000000000")
				o.Session.Status.DrainSequence = 4
			}, kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, 5, now) }},

		// Force.
		{name: "force-update true commits a stale pod's replacement without a drain",
			edit: func(o *Observed) { o.Session.Annotations = map[string]string{lullv1.AnnotationForceUpdate: "true"} },
			kind: Commit, why: lullv1.ReasonForced, commit: committed(podUID, lullv1.ReplacementForced, "")},
		{name: "force-update with the exact request ID replaces the pod",
			edit: func(o *Observed) {
				outstanding(o, requested(podUID, newRev, 1, earlier))
				o.Session.Annotations = map[string]string{lullv1.AnnotationForceUpdate: requested(podUID, newRev, 1, earlier).RequestID}
			}, kind: Commit, why: lullv1.ReasonForced, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, 1, earlier) },
			commit: committed(podUID, lullv1.ReplacementForced, requested(podUID, newRev, 1, earlier).RequestID)},
		{name: "a committed forced replacement is finished after the annotation is gone",
			edit: func(o *Observed) {
				outstanding(o, requested(podUID, newRev, 1, earlier))
				o.Session.Status.Replacement = committed(podUID, lullv1.ReplacementForced, requested(podUID, newRev, 1, earlier).RequestID)
				o.Session.Status.Runtime = report(podUID, "", lullv1.RuntimeServing, 1)
			}, kind: DeletePod, why: lullv1.ReasonForced, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, 1, earlier) },
			commit: committed(podUID, lullv1.ReplacementForced, requested(podUID, newRev, 1, earlier).RequestID)},
		{name: "force-update with another request ID is ignored",
			edit: func(o *Observed) {
				outstanding(o, requested(podUID, newRev, 1, earlier))
				o.Session.Annotations = map[string]string{lullv1.AnnotationForceUpdate: requested("pod-0", newRev, 1, earlier).RequestID}
			}, kind: Wait, why: lullv1.ReasonDraining, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, 1, earlier) }},
		{name: "force-update does not touch a current pod",
			edit: func(o *Observed) {
				o.Pod.Labels[appsv1.ControllerRevisionHashLabelKey] = newRev
				o.Session.Annotations = map[string]string{lullv1.AnnotationForceUpdate: "true"}
			}, kind: Wait, why: lullv1.ReasonUpToDate},

		// Drain.
		{name: "stale healthy pod gets a drain request",
			kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, 1, now) }},
		{name: "request for an older revision is replaced by one with the next sequence number",
			edit: func(o *Observed) { outstanding(o, requested(podUID, "s-older", 1, earlier)) },
			kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, 2, now) }},
		{name: "the same revision again after a withdrawal gets a new ID (rollback, then roll out again)",
			edit: func(o *Observed) {
				o.Session.Status.DrainSequence = 1 // request 1 for newRev was issued, then withdrawn
				o.Session.Status.Runtime = report(podUID, requested(podUID, newRev, 1, earlier).RequestID, lullv1.RuntimeDrained, 0)
			}, kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, 2, now) }},
		{name: "request for a previous pod is replaced by one for this pod",
			edit: func(o *Observed) { outstanding(o, requested("pod-0", newRev, 1, earlier)) },
			kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, 2, now) }},
		{name: "outstanding request without a report waits",
			edit: func(o *Observed) { outstanding(o, requested(podUID, newRev, 1, earlier)) },
			kind: Wait, why: lullv1.ReasonDraining, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, 1, earlier) }},
		{name: "runtime still draining waits",
			edit: func(o *Observed) {
				outstanding(o, requested(podUID, newRev, 1, earlier))
				o.Session.Status.Runtime = report(podUID, requested(podUID, newRev, 1, earlier).RequestID, lullv1.RuntimeDraining, 2)
			}, kind: Wait, why: lullv1.ReasonDraining, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, 1, earlier) }},
		{name: "matching Drained report commits the replacement",
			edit: func(o *Observed) {
				outstanding(o, requested(podUID, newRev, 1, earlier))
				o.Session.Status.Runtime = report(podUID, requested(podUID, newRev, 1, earlier).RequestID, lullv1.RuntimeDrained, 0)
			}, kind: Commit, why: lullv1.ReasonDrained, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, 1, earlier) },
			commit: committed(podUID, lullv1.ReplacementDrained, requested(podUID, newRev, 1, earlier).RequestID)},
		{name: "Drained report with a wrong request ID deletes nothing",
			edit: func(o *Observed) {
				outstanding(o, requested(podUID, newRev, 2, earlier))
				o.Session.Status.Runtime = report(podUID, requested(podUID, newRev, 1, earlier).RequestID, lullv1.RuntimeDrained, 0)
			}, kind: Wait, why: lullv1.ReasonDraining, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, 2, earlier) }},
		{name: "Drained report from the old pod after the pod was recreated deletes nothing",
			edit: func(o *Observed) {
				o.Pod.UID = "pod-2"
				outstanding(o, requested(podUID, newRev, 1, earlier))
				o.Session.Status.Runtime = report(podUID, requested(podUID, newRev, 1, earlier).RequestID, lullv1.RuntimeDrained, 0)
			}, kind: RequestDrain, why: lullv1.ReasonDrainRequested, drain: func() *lullv1.DrainRequest { return requested("pod-2", newRev, 2, now) }},
		{name: "malformed Drained report (turns still active) deletes nothing",
			edit: func(o *Observed) {
				outstanding(o, requested(podUID, newRev, 1, earlier))
				o.Session.Status.Runtime = report(podUID, requested(podUID, newRev, 1, earlier).RequestID, lullv1.RuntimeDrained, 1)
			}, kind: Wait, why: lullv1.ReasonDraining, drain: func() *lullv1.DrainRequest { return requested(podUID, newRev, 1, earlier) }},
	}
	runDecideTable(t, tests)
}

// A restarted controller that observes the same pod and revision keeps the
// outstanding request, byte for byte, whatever the clock says.
func TestDecideIsStableAcrossRestarts(t *testing.T) {
	f := newFixture()
	first := decide(f.o)
	f.o.Session.Status = nextStatus(f.o, first)
	f.o.Now = now.Add(time.Hour)
	again := decide(f.o)
	if again.Kind != Wait || *again.Drain != *first.Drain {
		t.Fatalf("after restart: %s with %+v, want Wait keeping %+v", again.Kind, again.Drain, first.Drain)
	}
}

// A suspended session keeps its pod until the replacement is committed
// (the Drained report confirmed on the API server), or it cannot drain.
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
			outstanding(o, manual(podUID, 1, now))
			o.Session.Status.Runtime = report(podUID, id, lullv1.RuntimeDraining, 1)
		}, 1},
		{"suspended, no drain request yet", func(o *Observed) { o.Session.Spec.Suspend = true }, 1},
		{"suspended, Drained but not yet committed: the cache alone never scales away", func(o *Observed) {
			o.Session.Spec.Suspend = true
			outstanding(o, manual(podUID, 1, now))
			o.Session.Status.Runtime = report(podUID, id, lullv1.RuntimeDrained, 0)
		}, 1},
		{"suspended, committed", func(o *Observed) {
			o.Session.Spec.Suspend = true
			outstanding(o, manual(podUID, 1, now))
			o.Session.Status.Replacement = committed(podUID, lullv1.ReplacementDrained, id)
		}, 0},
		{"suspended, committed for a previous pod", func(o *Observed) {
			o.Session.Spec.Suspend = true
			o.Session.Status.Replacement = committed("pod-0", lullv1.ReplacementDrained, id)
		}, 1},
		{"suspended, failure committed: scaled away, never deleted at one replica", func(o *Observed) {
			o.Session.Spec.Suspend = true
			o.Pod.Status.Phase = corev1.PodFailed
			o.Session.Status.Replacement = committed(podUID, lullv1.ReplacementPodFailed, "")
		}, 0},
		{"suspended, force-update true but not yet committed: the annotation alone never scales away", func(o *Observed) {
			o.Session.Spec.Suspend = true
			o.Session.Annotations = map[string]string{lullv1.AnnotationForceUpdate: "true"}
		}, 1},
		{"suspended, forced replacement committed", func(o *Observed) {
			o.Session.Spec.Suspend = true
			o.Session.Status.Replacement = committed(podUID, lullv1.ReplacementForced, "")
		}, 0},
		{"suspended, pod terminating", func(o *Observed) {
			o.Session.Spec.Suspend = true
			ts := metav1.NewTime(now)
			o.Pod.DeletionTimestamp = &ts
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

// Flipping a template between two revisions over one busy pod, and
// suspending and resuming it in between, issues a request with an ID never
// used before at every turn: no Drained report of an earlier request can
// answer a later one.
func TestRequestIDsAreNeverReused(t *testing.T) {
	f := newFixture()
	seen := map[string]int{}
	for i := range 40 {
		f.o.Now = now.Add(time.Duration(i) * time.Second)
		f.o.Session.Spec.Suspend = i%7 == 3
		f.o.StatefulSet.Status.UpdateRevision = []string{newRev, "s-rollback"}[i%2]
		a := decide(f.o)
		if a.Kind != RequestDrain {
			t.Fatalf("step %d: %s/%s, want RequestDrain", i, a.Kind, a.Reason)
		}
		if prev, ok := seen[a.Drain.RequestID]; ok {
			t.Fatalf("step %d reissued request ID %s of step %d", i, a.Drain.RequestID, prev)
		}
		seen[a.Drain.RequestID] = i
		f.o.Session.Status = nextStatus(f.o, a)
		// The runtime answers Drained; a withdrawal (the next step's change
		// of revision) must not let this answer stand for the next request.
		f.o.Session.Status.Runtime = report(podUID, a.Drain.RequestID, lullv1.RuntimeDrained, 0)
		if i%3 == 0 {
			f.o.Session.Status.Drain = nil // withdrawn, e.g. the session was blocked
		}
	}
}

func TestBackoff(t *testing.T) {
	for n, want := range map[int32]time.Duration{0: 0, 1: 5 * time.Second, 2: 10 * time.Second, 3: 20 * time.Second, 7: 5 * time.Minute, 50: 5 * time.Minute} {
		if got := Backoff(n); got != want {
			t.Errorf("Backoff(%d) = %s, want %s", n, got, want)
		}
	}
}
