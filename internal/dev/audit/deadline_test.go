package audit

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// A deletion made before the drain request's deadline is too early, even
// when the auditor sees it only after the deadline (watch latency). The API server stamps when the
// delete was made: deletionTimestamp minus deletionGracePeriodSeconds.
// Judging the deadline on the auditor's own clock lets a deletion five
// seconds early pass.
func TestDeadlineJudgedOnWhenTheDeleteWasMade(t *testing.T) {
	a := newAuditor()
	deadline := t0.Add(time.Minute)
	req := request("p", "update-a", 1)
	req.Deadline = &metav1.Time{Time: deadline}
	s := &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", ResourceVersion: "10"}}
	s.Status.Drain = req
	s.Status.Runtime = report("p", "update-a", lullv1.RuntimeDraining, 1) // a turn in flight
	a.observeSession(s, t0)

	pod := runningPod("p")
	pod.ResourceVersion = "11"
	a.observePod(pod, false, t0.Add(time.Second))

	// Deleted 5 s before the deadline with a 30 s grace period; the auditor
	// sees it 2 s after the deadline.
	deleted := pod.DeepCopy()
	deleted.ResourceVersion = "20"
	deleted.DeletionTimestamp = &metav1.Time{Time: deadline.Add(-5 * time.Second).Add(30 * time.Second)}
	deleted.DeletionGracePeriodSeconds = ptr.To[int64](30)
	a.observePod(deleted, false, deadline.Add(2*time.Second))

	ds := a.Deletions()
	if len(ds) != 1 {
		t.Fatalf("deletions = %+v", ds)
	}
	if v := DeletionViolation(ds[0]); ds[0].DeadlinePassed || v == "" {
		t.Errorf("a pod deleted 5 s before its drain deadline (seen 2 s after it) is allowed: DeadlinePassed=%v violation=%q", ds[0].DeadlinePassed, v)
	}
}

// A deadline added to a drain request already outstanding (a break-glass
// arriving after the wave's drain request) is a new fact for the rules,
// even though the request's ID, pod, time and sequence are unchanged: the
// version that carries it must be kept, not dropped as a repeat of the
// version before it. The times are those of a failed TestBreakGlass run:
// the request at 10:19:02, the runtime's Draining report, the break-glass
// deadline (10:19:05) written to the same request, the delete at 10:19:05.11.
func TestDeadlineAddedToAnOutstandingRequest(t *testing.T) {
	at := func(sec float64) time.Time {
		return time.Date(2026, 11, 30, 10, 19, 0, 0, time.UTC).Add(time.Duration(sec * float64(time.Second)))
	}
	deadline := at(5)
	for _, tc := range []struct {
		name      string
		deletedAt time.Time // when the delete was made
		allowed   bool
	}{
		{"at the deadline", at(5.111132033), true},
		{"a second before it", at(4.111132033), false},
		{"just before it", at(4.999), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAuditor()
			pod := runningPod("p")
			pod.ResourceVersion = "5"
			a.observePod(pod, false, at(1))

			s := &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", ResourceVersion: "10"}}
			s.Status.Drain = request("p", "update-a", 1)
			s.Status.Drain.RequestedAt = metav1.NewTime(at(2))
			s.Status.Runtime = report("p", "", lullv1.RuntimeServing, 1)
			a.observeSession(s.DeepCopy(), at(2.2))

			s.ResourceVersion = "11"
			s.Status.Runtime = report("p", "update-a", lullv1.RuntimeDraining, 1) // an hour-long turn open
			a.observeSession(s.DeepCopy(), at(2.4))

			s.ResourceVersion = "12"
			s.Status.Drain.Deadline = &metav1.Time{Time: deadline} // the break-glass grace
			a.observeSession(s.DeepCopy(), at(2.6))

			deleted := pod.DeepCopy()
			deleted.ResourceVersion = "20"
			// The API server stores the deletionTimestamp to the second.
			deleted.DeletionTimestamp = &metav1.Time{Time: tc.deletedAt.Add(30 * time.Second).Truncate(time.Second)}
			deleted.DeletionGracePeriodSeconds = ptr.To[int64](30)
			a.observePod(deleted, false, tc.deletedAt.Add(time.Millisecond))

			ds := a.Deletions()
			if len(ds) != 1 {
				t.Fatalf("deletions = %+v", ds)
			}
			v := DeletionViolation(ds[0])
			if tc.allowed && (!ds[0].DeadlinePassed || v != "") {
				t.Errorf("a pod deleted at its drain deadline, added to the outstanding request, is a violation: DeadlinePassed=%v violation=%q", ds[0].DeadlinePassed, v)
			}
			if !tc.allowed && (ds[0].DeadlinePassed || v == "") {
				t.Errorf("a pod deleted before its drain deadline is allowed: DeadlinePassed=%v violation=%q", ds[0].DeadlinePassed, v)
			}
		})
	}
}

// Every field of a sighting that a rule reads makes a new sighting when it
// changes; the auditor drops only versions that repeat them all.
func TestSameForRulesComparesWhatTheRulesRead(t *testing.T) {
	base := func() Sighting {
		d := request("p", "update-a", 1)
		return Sighting{RV: 1, Drain: d, Runtime: report("p", "update-a", lullv1.RuntimeDraining, 1)}
	}
	later := metav1.NewTime(t0.Add(time.Hour))
	for name, change := range map[string]func(*Sighting){
		"force":              func(s *Sighting) { s.Force = "true" },
		"drain withdrawn":    func(s *Sighting) { s.Drain = nil },
		"request ID":         func(s *Sighting) { s.Drain.RequestID = "update-b" },
		"request pod":        func(s *Sighting) { s.Drain.PodUID = "q" },
		"requested at":       func(s *Sighting) { s.Drain.RequestedAt = later },
		"sequence":           func(s *Sighting) { s.Drain.Sequence = 2 },
		"deadline added":     func(s *Sighting) { s.Drain.Deadline = &later },
		"runtime gone":       func(s *Sighting) { s.Runtime = nil },
		"runtime pod":        func(s *Sighting) { s.Runtime.PodUID = "q" },
		"runtime request ID": func(s *Sighting) { s.Runtime.RequestID = "" },
		"runtime state":      func(s *Sighting) { s.Runtime.State = lullv1.RuntimeDrained },
		"active turns":       func(s *Sighting) { s.Runtime.ActiveTurns = 0 },
	} {
		a, b := base(), base()
		b.RV = 2
		change(&b)
		if sameForRules(a, b) || sameForRules(b, a) {
			t.Errorf("%s changed, yet the sightings are the same for the rules", name)
		}
	}
	a, b := base(), base()
	deadline := metav1.NewTime(t0.Add(time.Minute))
	a.Drain.Deadline, b.Drain.Deadline = &deadline, deadline.DeepCopy()
	b.RV, b.At = 2, t0.Add(time.Second)
	if !sameForRules(a, b) {
		t.Errorf("two versions with the same facts (and the same deadline) are not the same for the rules")
	}
	b.Drain.Deadline = &later
	if sameForRules(a, b) {
		t.Errorf("a deadline moved, yet the sightings are the same for the rules")
	}
}
