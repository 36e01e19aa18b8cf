package audit

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"lull.dev/lull/internal/journal"
)

// The auditor is the referee of every end-to-end test: it must catch each
// kind of violation, and pass a clean replacement.
func TestCheck(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	type turn struct {
		pod        types.UID
		begin, end float64 // end < 0: never ended
	}
	tests := []struct {
		name        string
		deletion    Deletion
		deletionRV  uint64
		drained     float64 // seconds; < 0: no Drained report seen
		drainedRV   uint64
		exempt      bool
		turns       []turn
		violations  []string // substrings, one per expected violation
		interrupted int
	}{
		{name: "drained, then deleted, turns ended before", deletion: Deletion{PodUID: "p"}, deletionRV: 20, drained: 5, drainedRV: 10,
			turns: []turn{{"p", 1, 4}}},
		{name: "deleted without a Drained report", deletion: Deletion{PodUID: "p"}, deletionRV: 20, drained: -1,
			violations: []string{"without a matching Drained report"}},
		{name: "Drained report written after the deletion does not count", deletion: Deletion{PodUID: "p"}, deletionRV: 20, drained: 5, drainedRV: 30,
			violations: []string{"without a matching Drained report"}},
		{name: "turn open when the pod was deleted", deletion: Deletion{PodUID: "p"}, deletionRV: 20, drained: 5, drainedRV: 10,
			turns: []turn{{"p", 1, -1}}, violations: []string{"open when the pod was deleted"}, interrupted: 1},
		{name: "turn began after the Drained report", deletion: Deletion{PodUID: "p"}, deletionRV: 20, drained: 5, drainedRV: 10,
			turns: []turn{{"p", 6, 7}}, violations: []string{"after the runtime reported Drained"}},
		{name: "failed pod may be deleted mid-turn", deletion: Deletion{PodUID: "p", Failed: true}, deletionRV: 20, drained: -1,
			turns: []turn{{"p", 1, -1}}, interrupted: 1},
		{name: "forced replacement is not judged", deletion: Deletion{PodUID: "p", Forced: true}, deletionRV: 20, drained: -1,
			turns: []turn{{"p", 1, -1}}, interrupted: 1},
		{name: "exempt deletion is not judged", deletion: Deletion{PodUID: "p"}, deletionRV: 20, drained: -1, exempt: true},
		{name: "open turn on a pod still running is in flight, not interrupted", deletion: Deletion{PodUID: "p"}, deletionRV: 20, drained: 5, drainedRV: 10,
			turns: []turn{{"p", 1, 2}, {"other", 1, -1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.deletion
			d.Namespace, d.Session, d.Pod, d.At, d.rv = "ns", "s", "s-0", at(10), tt.deletionRV
			a := &Auditor{deletions: map[types.UID]*Deletion{d.PodUID: &d}, drainedAt: map[types.UID]time.Time{},
				drainedRV: map[types.UID]uint64{}, exempt: map[types.UID]string{}}
			if tt.drained >= 0 {
				a.drainedAt[d.PodUID], a.drainedRV[d.PodUID] = at(tt.drained), tt.drainedRV
			}
			if tt.exempt {
				a.exempt[d.PodUID] = "test"
			}
			dir := t.TempDir()
			w, err := journal.Create(filepath.Join(dir, "j.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			for i, tr := range tt.turns {
				e := journal.Entry{Namespace: "ns", Session: "s", PodUID: tr.pod, Turn: i + 1}
				e.Time, e.Event = at(tr.begin), journal.Begin
				_ = w.Write(e)
				if tr.end >= 0 {
					e.Time, e.Event = at(tr.end), journal.End
					_ = w.Write(e)
				}
			}
			w.Close()
			rep, err := a.Check(dir, "ns")
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Violations) != len(tt.violations) {
				t.Fatalf("violations = %q, want %d", rep.Violations, len(tt.violations))
			}
			for i, want := range tt.violations {
				if !strings.Contains(rep.Violations[i], want) {
					t.Errorf("violation %d = %q, want it to say %q", i, rep.Violations[i], want)
				}
			}
			if len(rep.Interrupted) != tt.interrupted {
				t.Errorf("interrupted = %d, want %d", len(rep.Interrupted), tt.interrupted)
			}
		})
	}
}
