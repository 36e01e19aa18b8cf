package rollout

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

func TestNextRetry(t *testing.T) {
	// Tries at +5s, +15s, +35s, +75s, +155s, +315s, then every 5 minutes.
	for _, tc := range []struct{ elapsed, want time.Duration }{
		{0, 5 * time.Second}, {4 * time.Second, 5 * time.Second}, {5 * time.Second, 15 * time.Second},
		{16 * time.Second, 35 * time.Second}, {315 * time.Second, 615 * time.Second}, {616 * time.Second, 915 * time.Second},
	} {
		if got := NextRetry(now, now.Add(tc.elapsed)).Sub(now); got != tc.want {
			t.Errorf("NextRetry after %s = +%s, want +%s", tc.elapsed, got, tc.want)
		}
	}
}

// A blocked session says why on Ready (False) and UpToDate (Unknown), and
// when it is tried next, counted from when the problem began; it withdraws
// a drain request that is not committed and keeps one that is; a session
// waiting for its template's files keeps the Ready its pod gives it; and
// nothing of what a blocked reconcile did not read (the StatefulSet, the
// policy) shows in its status.
func TestBlockedStatusSaysWhyAndWhenWithoutTouchingThePod(t *testing.T) {
	since := now.Add(-16 * time.Second)
	for _, tc := range []struct {
		name      string
		edit      func(o *Observed)
		reason    string
		ready     metav1.ConditionStatus
		readyWhy  string
		changed   time.Time // both conditions' transition time; zero: not judged here
		nextTry   time.Time
		drain     bool // the outstanding request is kept
		committed bool
	}{{
		name:   "a new problem",
		reason: lullv1.ReasonRenderFailed, ready: metav1.ConditionFalse, readyWhy: lullv1.ReasonRenderFailed,
		changed: now, nextTry: now.Add(5 * time.Second),
	}, {
		name: "a problem that began 16 s ago",
		edit: func(o *Observed) {
			o.Session.Status.Conditions = []metav1.Condition{
				{Type: lullv1.ConditionReady, Status: metav1.ConditionFalse, Reason: lullv1.ReasonRenderFailed, LastTransitionTime: metav1.NewTime(since)},
				{Type: lullv1.ConditionUpToDate, Status: metav1.ConditionUnknown, Reason: lullv1.ReasonRenderFailed, LastTransitionTime: metav1.NewTime(since)}}
		},
		reason: lullv1.ReasonRenderFailed, ready: metav1.ConditionFalse, readyWhy: lullv1.ReasonRenderFailed,
		nextTry: since.Add(35 * time.Second),
	}, {
		name: "a new problem where Ready was False already",
		edit: func(o *Observed) {
			o.Pod.Status.Conditions = nil // not ready: Ready stays False
			o.Session.Status.PodName, o.Session.Status.PodUID = o.Pod.Name, o.Pod.UID
			o.Session.Status.Conditions = []metav1.Condition{
				{Type: lullv1.ConditionReady, Status: metav1.ConditionFalse, Reason: "PodNotReady", LastTransitionTime: metav1.NewTime(since)},
				{Type: lullv1.ConditionUpToDate, Status: metav1.ConditionFalse, Reason: lullv1.ReasonDraining, LastTransitionTime: metav1.NewTime(since)}}
		},
		reason: lullv1.ReasonNameConflict, ready: metav1.ConditionFalse, readyWhy: lullv1.ReasonNameConflict,
		changed: now, nextTry: now.Add(5 * time.Second),
	}, {
		name:   "a wait for the template's files",
		reason: lullv1.ReasonFilesNotReady, ready: metav1.ConditionTrue, readyWhy: "PodReady",
		changed: now, nextTry: now.Add(5 * time.Second),
	}, {
		name:   "an uncommitted drain request",
		edit:   func(o *Observed) { outstanding(o, requested(podUID, newRev, 1, now)) },
		reason: lullv1.ReasonTemplateNotFound, ready: metav1.ConditionFalse, readyWhy: lullv1.ReasonTemplateNotFound,
		changed: now, nextTry: now.Add(5 * time.Second),
	}, {
		name: "a committed replacement of the pod",
		edit: func(o *Observed) {
			d := requested(podUID, newRev, 1, now)
			outstanding(o, d)
			o.Session.Status.Replacement = committed(podUID, lullv1.ReplacementDrained, d.RequestID)
		},
		reason: lullv1.ReasonTemplateNotFound, ready: metav1.ConditionFalse, readyWhy: lullv1.ReasonTemplateNotFound,
		changed: now, nextTry: now.Add(5 * time.Second), drain: true, committed: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture()
			f.o.Session.Status.UpdateRevision = oldRev
			if tc.edit != nil {
				tc.edit(&f.o)
			}
			st, a := BlockedStatus(f.o, tc.reason, "it cannot be rendered")
			if a.Kind != Block || a.Reason != tc.reason || a.RequeueAfter != tc.nextTry.Sub(now) {
				t.Errorf("action = %s %s after %s, want Block %s after %s", a.Kind, a.Reason, a.RequeueAfter, tc.reason, tc.nextTry.Sub(now))
			}
			wantMsg := "it cannot be rendered; next try at " + tc.nextTry.UTC().Format(time.RFC3339)
			if a.Message != wantMsg {
				t.Errorf("message = %q, want %q", a.Message, wantMsg)
			}
			for _, want := range []metav1.Condition{
				{Type: lullv1.ConditionReady, Status: tc.ready, Reason: tc.readyWhy},
				{Type: lullv1.ConditionUpToDate, Status: metav1.ConditionUnknown, Reason: tc.reason, Message: wantMsg},
			} {
				c := meta.FindStatusCondition(st.Conditions, want.Type)
				if c == nil || c.Status != want.Status || c.Reason != want.Reason || (want.Message != "" && c.Message != want.Message) {
					t.Errorf("%s = %+v, want %s %s %q", want.Type, c, want.Status, want.Reason, want.Message)
					continue
				}
				if c.Reason == tc.reason && !tc.changed.IsZero() && !c.LastTransitionTime.Time.Equal(tc.changed) {
					t.Errorf("%s changed at %s, want %s (when the problem began)", want.Type, c.LastTransitionTime, tc.changed)
				}
			}
			if (st.Drain != nil) != tc.drain || (st.Replacement != nil) != tc.committed {
				t.Errorf("drain %+v, replacement %+v; want kept: %t, %t", st.Drain, st.Replacement, tc.drain, tc.committed)
			}
			if st.UpdateRevision != oldRev {
				t.Errorf("updateRevision = %q, want %q as the status had it: the StatefulSet was not read", st.UpdateRevision, oldRev)
			}
			if st.Runtime != nil || st.PodUID != podUID || st.Phase == "" {
				t.Errorf("status = %+v, want the pod named and the runtime's report left out", st)
			}
		})
	}

	t.Run("the lifecycle is judged without a policy", func(t *testing.T) {
		f := newFixture()
		f.o.Session.Status.Runtime = report(podUID, "", lullv1.RuntimeServing, 0)
		f.o.Session.Status.Runtime.RefreshSeconds = 60
		f.o.Lifecycle.SuspendAfter = time.Minute
		st, _ := BlockedStatus(f.o, lullv1.ReasonTemplateNotFound, "gone")
		if l := st.Lifecycle; l != nil && (l.IdleSince != nil || l.CullAt != nil) {
			t.Errorf("lifecycle = %+v, want no idle clock: a blocked reconcile has not read the template's idle policy", l)
		}
		if c := meta.FindStatusCondition(st.Conditions, lullv1.ConditionActive); c == nil || !strings.HasPrefix(c.Reason, "Idle") {
			t.Errorf("Active = %+v, want the idle runtime judged Idle", c)
		}
	})
}
