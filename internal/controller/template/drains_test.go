package template

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// TestDrainClock measures a move from the drain request to the session seen
// up to date, and ignores sessions never seen draining.
func TestDrainClock(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	tmpl := types.NamespacedName{Namespace: "ns", Name: "t"}
	draining := lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "a-1"}}
	draining.Status.Drain = &lullv1.DrainRequest{Reason: lullv1.DrainReasonUpdate, RequestedAt: metav1.NewTime(t0)}
	current := lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "a-1"}}
	current.Status.Conditions = []metav1.Condition{{Type: lullv1.ConditionUpToDate, Status: metav1.ConditionTrue}}
	neverSeen := current.DeepCopy()
	neverSeen.Name, neverSeen.UID = "b", "b-1"

	var d drainClock
	if _, ok := d.meanOf(tmpl); ok {
		t.Fatal("a mean before any move")
	}
	d.observe(tmpl, "t-1", []lullv1.Session{draining}, t0.Add(time.Second))
	d.observe(tmpl, "t-1", []lullv1.Session{current, *neverSeen}, t0.Add(10*time.Second))
	if m, ok := d.meanOf(tmpl); !ok || m != 10*time.Second {
		t.Errorf("mean = %s %v, want 10s", m, ok)
	}
}
