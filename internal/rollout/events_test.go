package rollout

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

func (e Event) String() string {
	return fmt.Sprintf("%s %s %s related=%t", e.Type, e.Reason, e.Action, e.Related != nil)
}

func condition(typ string, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg}
}

// Every Event a status write of the session controller records: those of
// the rollout step's write, of a commitment and of a blocked session's
// write, in the order they are recorded, and none for a condition the
// session already shows.
func TestEventsFollowingAStatusWrite(t *testing.T) {
	forced := func(o *Observed) {
		o.ForcedBy = "alice"
		o.Session.Annotations = map[string]string{lullv1.AnnotationForceUpdate: "true", lullv1.AnnotationForceUpdateReason: "runtime hung"}
	}
	type write struct {
		before lullv1.SessionStatus // the status as read
		next   lullv1.SessionStatus // the status written
		a      Action
		edit   func(o *Observed)
	}
	upToDate := condition(lullv1.ConditionUpToDate, metav1.ConditionTrue, lullv1.ReasonUpToDate, "")
	draining := condition(lullv1.ConditionUpToDate, metav1.ConditionFalse, lullv1.ReasonDraining, "")
	notReporting := condition(lullv1.ConditionActive, metav1.ConditionUnknown, lullv1.ReasonRuntimeNotReporting, "pod s-0 has been ready since ...")
	noReport := condition(lullv1.ConditionActive, metav1.ConditionUnknown, "NoReport", "")
	running := lullv1.SessionStatus{Phase: lullv1.SessionRunning, UpdateRevision: newRev, CurrentRevision: oldRev, Conditions: []metav1.Condition{draining, noReport}}
	updated := lullv1.SessionStatus{Phase: lullv1.SessionRunning, UpdateRevision: newRev, CurrentRevision: newRev, Conditions: []metav1.Condition{upToDate, noReport}}
	blocked := func(reason string) write {
		return write{before: running, next: running, a: Action{Kind: Block, Reason: reason, Message: "cannot render; next try at ..."}}
	}
	stuck := func(reason string) lullv1.SessionStatus {
		return lullv1.SessionStatus{Phase: lullv1.SessionPending, Conditions: []metav1.Condition{condition(lullv1.ConditionUpToDate, metav1.ConditionFalse, reason, "")}}
	}
	for _, tc := range []struct {
		name string
		w    write
		want []string
		note string // the last Event's note ends with it
	}{
		// The rollout step's write (the reconciler).
		{name: "a drain request",
			w:    write{before: running, next: running, a: Action{Kind: RequestDrain, Reason: lullv1.ReasonDrainRequested, Message: "asked"}},
			want: []string{"Normal DrainRequested RequestDrain related=true"}, note: "asked"},
		{name: "a lifetime drain request",
			w:    write{before: running, next: running, a: Action{Kind: RequestDrain, Reason: lullv1.ReasonLifetime}},
			want: []string{"Normal Lifetime RequestDrain related=true"}},
		{name: "an idle drain request",
			w:    write{before: running, next: running, a: Action{Kind: RequestDrain, Reason: lullv1.ReasonIdleCull}},
			want: []string{"Normal IdleCull RequestDrain related=true"}},
		{name: "the session up to date on its new revision",
			w:    write{before: running, next: updated, a: Action{Kind: Wait, Reason: lullv1.ReasonUpToDate, Message: "runs the update revision"}},
			want: []string{"Normal Updated Rollout related=true"}, note: "runs the update revision"},
		{name: "up to date already",
			w: write{before: updated, next: updated, a: Action{Kind: Wait, Reason: lullv1.ReasonUpToDate}}},
		{name: "up to date before the update revision was known",
			w: write{before: lullv1.SessionStatus{Phase: lullv1.SessionPending, Conditions: []metav1.Condition{draining}}, next: updated, a: Action{Kind: Wait, Reason: lullv1.ReasonUpToDate}}},
		{name: "up to date on the revision the pod ran (a suspension taken back)",
			w: write{before: lullv1.SessionStatus{Phase: lullv1.SessionRunning, UpdateRevision: newRev, CurrentRevision: newRev, Conditions: []metav1.Condition{draining}},
				next: updated, a: Action{Kind: Wait, Reason: lullv1.ReasonUpToDate}}},
		{name: "up to date on a resume",
			w: write{before: lullv1.SessionStatus{Phase: lullv1.SessionSuspended, UpdateRevision: newRev, CurrentRevision: oldRev, Conditions: []metav1.Condition{draining}},
				next: updated, a: Action{Kind: Wait, Reason: lullv1.ReasonUpToDate}},
			want: []string{"Normal Resumed Resume related=false"}},
		{name: "a pod newly stuck terminating",
			w:    write{before: running, next: stuck(lullv1.ReasonPodStuckTerminating), a: Action{Kind: Wait, Reason: lullv1.ReasonPodStuckTerminating, Message: "still terminating"}},
			want: []string{"Warning PodStuckTerminating Rollout related=true"}, note: "still terminating"},
		{name: "a pod still stuck terminating",
			w: write{before: stuck(lullv1.ReasonPodStuckTerminating), next: stuck(lullv1.ReasonPodStuckTerminating), a: Action{Kind: Wait, Reason: lullv1.ReasonPodStuckTerminating}}},
		{name: "a drain newly overdue",
			w:    write{before: running, next: stuck(lullv1.ReasonDrainOverdue), a: Action{Kind: Wait, Reason: lullv1.ReasonDrainOverdue}},
			want: []string{"Warning DrainOverdue Rollout related=true"}},
		{name: "a drain still overdue",
			w: write{before: stuck(lullv1.ReasonDrainOverdue), next: stuck(lullv1.ReasonDrainOverdue), a: Action{Kind: Wait, Reason: lullv1.ReasonDrainOverdue}}},
		{name: "a wait that shows nothing new",
			w: write{before: running, next: running, a: Action{Kind: Wait, Reason: lullv1.ReasonDraining}}},

		// Any write's lifecycle (the reconciler's, a commitment's, a blocked session's).
		{name: "a suspension",
			w:    write{before: running, next: lullv1.SessionStatus{Phase: lullv1.SessionSuspended}, a: Action{Kind: Wait, Reason: lullv1.ReasonSuspended}},
			want: []string{"Normal Suspended Suspend related=false"}, note: "`lull resume s` resumes it"},
		{name: "a resume",
			w:    write{before: lullv1.SessionStatus{Phase: lullv1.SessionSuspended}, next: lullv1.SessionStatus{Phase: lullv1.SessionPending}, a: Action{Kind: Wait, Reason: lullv1.ReasonPodPending}},
			want: []string{"Normal Resumed Resume related=false"}},
		{name: "suspended still",
			w: write{before: lullv1.SessionStatus{Phase: lullv1.SessionSuspended}, next: lullv1.SessionStatus{Phase: lullv1.SessionSuspended}, a: Action{Kind: Wait, Reason: lullv1.ReasonSuspended}}},
		{name: "an idle drain withdrawn",
			w:    write{before: running, next: running, a: Action{Kind: Wait, Reason: lullv1.ReasonIdleCullWithdrawn, Message: "woke up"}},
			want: []string{"Normal IdleCullWithdrawn Cull related=true"}, note: "woke up"},
		{name: "a runtime newly not reporting",
			w: write{before: running, next: lullv1.SessionStatus{Phase: lullv1.SessionRunning, UpdateRevision: newRev, CurrentRevision: oldRev, Conditions: []metav1.Condition{draining, notReporting}},
				a: Action{Kind: Wait, Reason: lullv1.ReasonDraining}},
			want: []string{"Warning RuntimeNotReporting Report related=true"}, note: "has been ready since ..."},
		{name: "a runtime still not reporting",
			w: write{before: lullv1.SessionStatus{Conditions: []metav1.Condition{notReporting}}, next: lullv1.SessionStatus{Conditions: []metav1.Condition{notReporting}},
				a: Action{Kind: Wait, Reason: lullv1.ReasonDraining}}},

		// A commitment's write (act.go).
		{name: "a suspended session's pod forced away",
			w: write{before: running, next: lullv1.SessionStatus{Phase: lullv1.SessionPending}, edit: func(o *Observed) { forced(o); o.Session.Spec.Suspend = true },
				a: Action{Kind: Commit, Reason: lullv1.ReasonForced, Message: "scaling it away", Replacement: &lullv1.Replacement{Reason: lullv1.ReplacementForced}}},
			want: []string{"Warning Forced Suspend related=true"}, note: "scaling it away (set by alice; reason: runtime hung)"},
		{name: "a suspended session's drained pod committed",
			w: write{before: running, next: lullv1.SessionStatus{Phase: lullv1.SessionPending}, edit: func(o *Observed) { o.Session.Spec.Suspend = true },
				a: Action{Kind: Commit, Reason: lullv1.ReasonDrained, Replacement: &lullv1.Replacement{Reason: lullv1.ReplacementDrained}}}},
		{name: "a running session's pod forced (its delete has the Event)",
			w: write{before: running, next: lullv1.SessionStatus{Phase: lullv1.SessionPending}, edit: forced,
				a: Action{Kind: Commit, Reason: lullv1.ReasonForced, Replacement: &lullv1.Replacement{Reason: lullv1.ReplacementForced}}}},
		{name: "a commitment that suspends the session",
			w: write{before: running, next: lullv1.SessionStatus{Phase: lullv1.SessionSuspended}, edit: func(o *Observed) { forced(o); o.Session.Spec.Suspend = true },
				a: Action{Kind: Commit, Reason: lullv1.ReasonForced, Replacement: &lullv1.Replacement{Reason: lullv1.ReplacementForced}}},
			want: []string{"Normal Suspended Suspend related=false", "Warning Forced Suspend related=true"}},

		// A blocked session's write (blocked.go).
		{name: "a missing template", w: blocked(lullv1.ReasonTemplateNotFound),
			want: []string{"Warning TemplateNotFound Render related=false"}, note: "next try at ..."},
		{name: "a render refused", w: blocked(lullv1.ReasonRenderFailed), want: []string{"Warning RenderFailed Render related=false"}},
		{name: "a name taken", w: blocked(lullv1.ReasonNameConflict), want: []string{"Warning NameConflict Render related=false"}},
		{name: "an image off the catalog", w: blocked(lullv1.ReasonImageNotAllowed), want: []string{"Warning ImageNotAllowed Render related=false"}},
		{name: "a predecessor's objects left", w: blocked(lullv1.ReasonPredecessorTerminating), want: []string{"Warning PredecessorTerminating Render related=false"}},
		{name: "the pod's create refused", w: blocked(lullv1.ReasonPodCreateRefused), want: []string{"Warning PodCreateRefused Render related=false"}},
		{name: "the pod's create over quota", w: blocked(lullv1.ReasonPodQuotaExceeded), want: []string{"Warning PodQuotaExceeded Render related=false"}},
		{name: "the template's files not there yet", w: blocked(lullv1.ReasonFilesNotReady)},
		{name: "blocked for the same reason still",
			w: write{before: stuck(lullv1.ReasonRenderFailed), next: stuck(lullv1.ReasonRenderFailed), a: Action{Kind: Block, Reason: lullv1.ReasonRenderFailed}}},
		{name: "blocked, without a pod, once suspended",
			w: write{before: running, next: lullv1.SessionStatus{Phase: lullv1.SessionSuspended}, edit: func(o *Observed) { o.Pod = nil },
				a: Action{Kind: Block, Reason: lullv1.ReasonTemplateNotFound}},
			want: []string{"Warning TemplateNotFound Render related=false", "Normal Suspended Suspend related=false"}},

		// Several at once, in order.
		{name: "a resume that asks for a drain",
			w: write{before: lullv1.SessionStatus{Phase: lullv1.SessionSuspended}, next: lullv1.SessionStatus{Phase: lullv1.SessionDraining},
				a: Action{Kind: RequestDrain, Reason: lullv1.ReasonDrainRequested}},
			want: []string{"Normal Resumed Resume related=false", "Normal DrainRequested RequestDrain related=true"}},
		{name: "an update whose new runtime does not report",
			w: write{before: running, next: lullv1.SessionStatus{Phase: lullv1.SessionRunning, UpdateRevision: newRev, CurrentRevision: newRev, Conditions: []metav1.Condition{upToDate, notReporting}},
				a: Action{Kind: Wait, Reason: lullv1.ReasonUpToDate}},
			want: []string{"Warning RuntimeNotReporting Report related=true", "Normal Updated Rollout related=true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture()
			f.o.Session.Status = tc.w.before
			if tc.w.edit != nil {
				tc.w.edit(&f.o)
			}
			events := Events(f.o, tc.w.next, tc.w.a)
			var got []string
			for _, e := range events {
				got = append(got, e.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("events = %q, want %q", got, tc.want)
			}
			if tc.note != "" && !strings.HasSuffix(events[len(events)-1].Note, tc.note) {
				t.Errorf("note = %q, want it to end with %q", events[len(events)-1].Note, tc.note)
			}
		})
	}
}

// A pod deleted is a Warning where turns may have been cut short (a forced
// replacement naming who forced it and why, a Replace strategy's, a drain
// past its deadline), Normal otherwise; an idle cull's suspension and
// delete are Normal; a step carried out by its status write has none here.
func TestStepEventSaysWhereTurnsMayHaveBeenCutShort(t *testing.T) {
	for _, tc := range []struct {
		kind               Kind
		reason, want, note string
		forcedBy           string
	}{
		{kind: DeletePod, reason: lullv1.ReasonDrained, want: "Normal Drained DeletePod related=true", note: "replacing the pod"},
		{kind: DeletePod, reason: lullv1.ReasonForced, want: "Warning Forced DeletePod related=true", forcedBy: "alice", note: "replacing the pod (set by alice; reason: runtime hung)"},
		{kind: DeletePod, reason: lullv1.ReasonForced, want: "Warning Forced DeletePod related=true", note: "replacing the pod (set by unknown; reason: runtime hung)"},
		{kind: DeletePod, reason: lullv1.ReasonReplaced, want: "Warning Replaced DeletePod related=true", note: "replacing the pod"},
		{kind: DeletePod, reason: lullv1.ReasonDrainDeadlineExceeded, want: "Warning DrainDeadlineExceeded DeletePod related=true", note: "replacing the pod"},
		{kind: DeletePod, reason: string(lullv1.ReplacementPodFailed), want: "Normal PodFailed DeletePod related=true", note: "replacing the pod"},
		{kind: DeletePod, reason: string(lullv1.ReplacementNeverStarted), want: "Normal NeverStarted DeletePod related=true", note: "replacing the pod"},
		{kind: SuspendSession, reason: lullv1.ReasonIdleCull, want: "Normal IdleSuspend Cull related=true", note: "replacing the pod"},
		{kind: DeleteSession, reason: lullv1.ReasonIdleCull, want: "Normal IdleDelete Cull related=true", note: "replacing the pod"},
		{kind: Commit, reason: lullv1.ReasonForced},
		{kind: RequestDrain, reason: lullv1.ReasonDrainRequested},
		{kind: Wait, reason: lullv1.ReasonDraining},
		{kind: Block, reason: lullv1.ReasonRenderFailed},
	} {
		t.Run(string(tc.kind)+tc.reason+tc.forcedBy, func(t *testing.T) {
			f := newFixture()
			f.o.ForcedBy = tc.forcedBy
			f.o.Session.Annotations = map[string]string{lullv1.AnnotationForceUpdate: "true", lullv1.AnnotationForceUpdateReason: "runtime hung"}
			e, ok := StepEvent(f.o, Action{Kind: tc.kind, Reason: tc.reason, Message: "replacing the pod"})
			if ok != (tc.want != "") {
				t.Fatalf("StepEvent(%s) ok = %t, want %t", tc.kind, ok, tc.want != "")
			}
			if ok && (e.String() != tc.want || e.Note != tc.note) {
				t.Errorf("event = %s %q, want %s %q", e, e.Note, tc.want, tc.note)
			}
		})
	}
}
