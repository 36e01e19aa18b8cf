package runtimesdk

import (
	"testing"
	"testing/synctest"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Every report says when its process started (startedAt: when New made
// the Runtime, on the runtime's clock, to the second), the same on every
// report of the process however late it is written; with OmitStart, no
// report says it.
func TestReportsSayWhenTheProcessStarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSession()
		f.clock.SetTime(epoch.Add(700 * time.Millisecond))
		made := epoch // f.clock's time when the Runtime is made, to the second
		rt := newRuntime(testConfig(f), f)
		advance(f.clock, time.Minute) // Run comes later than New
		runRuntime(t, rt)
		first := wantReport(t, f, "the startup report", isState(lullv1.RuntimeServing, ""))
		if first.StartedAt == nil || !first.StartedAt.Time.Equal(made) {
			t.Fatalf("startup report's startedAt = %v, want %s, when the Runtime was made", first.StartedAt, made)
		}
		advance(f.clock, time.Hour)
		f.requestDrain(req1, testPod)
		r := wantReport(t, f, "Drained", isState(lullv1.RuntimeDrained, req1))
		if r.StartedAt == nil || !r.StartedAt.Time.Equal(made) {
			t.Errorf("a later report's startedAt = %v, want %s still", r.StartedAt, made)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		f := newFakeSession()
		cfg := testConfig(f)
		cfg.OmitStart = true
		runRuntime(t, newRuntime(cfg, f))
		if r := wantReport(t, f, "the startup report", isState(lullv1.RuntimeServing, "")); r.StartedAt != nil {
			t.Errorf("startedAt = %s with OmitStart, want none", r.StartedAt)
		}
	})
}

// A stored report that lost its startedAt (an overwrite by another
// writer) is not the report the runtime wrote: it is written again.
func TestReportWithoutItsStartIsNotTheSame(t *testing.T) {
	started := metav1.NewTime(epoch)
	want := reportFor(testPod, Snapshot{State: lullv1.RuntimeServing}, 60, &started)
	stored := want.DeepCopy()
	stored.StartedAt = nil
	if sameReport(want, stored) {
		t.Error("sameReport = true for a report that lost its startedAt")
	}
	if !sameReport(want, want.DeepCopy()) {
		t.Error("sameReport = false for a copy")
	}
}
