package runtimesdk

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// TestNotice checks what a runtime is told without being asked anything:
// its drain request's deadline and whether its pod is stale.
func TestNotice(t *testing.T) {
	deadline := metav1.NewTime(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	for _, tc := range []struct {
		name string
		st   lullv1.SessionStatus
		want Notice
	}{
		{"current pod", lullv1.SessionStatus{PodUID: "p", CurrentRevision: "r2", UpdateRevision: "r2"}, Notice{}},
		{"stale pod, no drain (Passive)", lullv1.SessionStatus{PodUID: "p", CurrentRevision: "r1", UpdateRevision: "r2"},
			Notice{UpdatePending: true, UpdateRevision: "r2"}},
		{"stale pod draining with a deadline", lullv1.SessionStatus{PodUID: "p", CurrentRevision: "r1", UpdateRevision: "r2",
			Drain: &lullv1.DrainRequest{RequestID: "update-0123456789abcdef", PodUID: "p", Reason: lullv1.DrainReasonUpdate, Deadline: &deadline}},
			Notice{Deadline: deadline.Time, UpdatePending: true, UpdateRevision: "r2"}},
		{"another pod's deadline", lullv1.SessionStatus{PodUID: "q", CurrentRevision: "r1", UpdateRevision: "r2",
			Drain: &lullv1.DrainRequest{RequestID: "update-0123456789abcdef", PodUID: "q", Reason: lullv1.DrainReasonUpdate, Deadline: &deadline}},
			Notice{}},
		{"revisions not known yet", lullv1.SessionStatus{PodUID: "p", UpdateRevision: "r2"}, Notice{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := notice(&lullv1.Session{Status: tc.st}, "p"); got != tc.want {
				t.Errorf("notice = %+v, want %+v", got, tc.want)
			}
		})
	}

	g := openGate(t, newFakeClock())
	g.SetNotice(Notice{Deadline: deadline.Time, UpdatePending: true, UpdateRevision: "r2"})
	snap := g.Snapshot()
	if !snap.Deadline.Equal(deadline.Time) || !snap.UpdatePending || snap.UpdateRevision != "r2" || !snap.Accepting {
		t.Errorf("snapshot %+v: want the notice shown and turns still accepted", snap)
	}
}
