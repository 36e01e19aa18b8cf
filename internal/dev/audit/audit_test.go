package audit

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/journal"
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
		pod         *corev1.Pod
		deletionRV  uint64
		drained     float64 // seconds; < 0: no Drained report seen
		drainedRV   uint64
		force       string
		exempt      bool
		turns       []turn
		violations  []string // substrings, one per expected violation
		interrupted int
	}{
		{name: "drained, then deleted, turns ended before", deletionRV: 20, drained: 5, drainedRV: 10,
			turns: []turn{{"p", 1, 4}}},
		{name: "deleted without a Drained report", deletionRV: 20, drained: -1,
			violations: []string{"without a matching Drained report"}},
		{name: "Drained report written after the deletion does not count", deletionRV: 20, drained: 5, drainedRV: 30,
			violations: []string{"without a matching Drained report"}},
		{name: "turn open when the pod was deleted", deletionRV: 20, drained: 5, drainedRV: 10,
			turns: []turn{{"p", 1, -1}}, violations: []string{"open when the pod was deleted"}, interrupted: 1},
		{name: "turn began after the Drained report", deletionRV: 20, drained: 5, drainedRV: 10,
			turns: []turn{{"p", 6, 7}}, violations: []string{"after the runtime reported Drained"}},
		{name: "failed pod may be deleted mid-turn", pod: withPhase(runningPod("p"), corev1.PodFailed), deletionRV: 20, drained: -1,
			turns: []turn{{"p", 1, -1}}, interrupted: 1},
		{name: "forced replacement is not judged", force: "true", deletionRV: 20, drained: -1,
			turns: []turn{{"p", 1, -1}}, interrupted: 1},
		{name: "exempt deletion is not judged", deletionRV: 20, drained: -1, exempt: true,
			turns: []turn{{"p", 1, -1}}, interrupted: 1},
		{name: "never-started pod needs no drain", pod: pendingPod("p"), deletionRV: 20, drained: -1},
		{name: "a turn open on a never-started pod is still interrupted", pod: pendingPod("p"), deletionRV: 20, drained: -1,
			turns: []turn{{"p", 1, -1}}, violations: []string{"open when the pod was deleted"}, interrupted: 1},
		{name: "open turn on a pod still running is in flight, not interrupted", deletionRV: 20, drained: 5, drainedRV: 10,
			turns: []turn{{"p", 1, 2}, {"other", 1, -1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := tt.pod
			if pod == nil {
				pod = runningPod("p")
			}
			d := Deletion{Namespace: "ns", Session: "s", Pod: "s-0", PodUID: "p", At: at(10), rv: tt.deletionRV, pod: pod}
			a := newAuditor()
			a.deletions[d.PodUID] = &d
			key := types.NamespacedName{Namespace: "ns", Name: "s"}
			req := request("p", "update-a", 1)
			a.sightings[key] = []Sighting{{RV: 1, At: at(0), Force: tt.force, Drain: req}}
			if tt.drained >= 0 {
				a.sightings[key] = append(a.sightings[key], Sighting{RV: tt.drainedRV, At: at(tt.drained), Force: tt.force, Drain: req, Runtime: report("p", "update-a", lullv1.RuntimeDrained, 0)})
			}
			if tt.exempt {
				a.Exempt(d.PodUID, "test")
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
			wantViolations(t, rep.Violations, tt.violations)
			if len(rep.Interrupted) != tt.interrupted {
				t.Errorf("interrupted = %d, want %d", len(rep.Interrupted), tt.interrupted)
			}
		})
	}
}

// The auditor fed the values etcd stores (a session as JSON, a pod as
// Kubernetes protobuf) at their revisions: deletions (a delete, a scale to
// zero, a pod removed without a deletionTimestamp) are judged by revision
// whatever order the two watches deliver them in; reused request IDs and
// expired turns reach the report.
func TestAuditorEvents(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	a := newAuditor()
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	st := newStore(scheme)
	pb := protobuf.NewSerializer(scheme, scheme)
	sess := func(ns, name string, rv int, d *lullv1.DrainRequest, r *lullv1.RuntimeReport) {
		s := &lullv1.Session{TypeMeta: metav1.TypeMeta{APIVersion: lullv1.GroupVersion.String(), Kind: "Session"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Status: lullv1.SessionStatus{Drain: d, Runtime: r}}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		a.feedSession(st, b, int64(rv), now)
	}
	podEvent := func(ns, session string, p *corev1.Pod, rv int, deleting, gone bool) {
		p = p.DeepCopy()
		p.APIVersion, p.Kind = "v1", "Pod"
		p.Namespace, p.Name, p.Labels[lullv1.LabelSession] = ns, session+"-0", session
		if deleting {
			p.DeletionTimestamp = &metav1.Time{Time: now}
		}
		var b bytes.Buffer
		if err := pb.Encode(p, &b); err != nil {
			t.Fatal(err)
		}
		a.feedPod(st, b.Bytes(), int64(rv), gone, now)
	}

	// s1: drained and deleted; the withdrawal and the reopening that
	// follow the deletion arrive before the pod watch shows it.
	reqA := request("p1", "update-a", 1)
	podEvent("ns", "s1", runningPod("p1"), 5, false, false)
	sess("ns", "s1", 6, reqA, withExpired(report("p1", "", lullv1.RuntimeServing, 1), 2))
	sess("ns", "s1", 7, reqA, report("p1", "update-a", lullv1.RuntimeDrained, 0))
	sess("ns", "s1", 9, nil, report("p1", "", lullv1.RuntimeServing, 0))
	podEvent("ns", "s1", runningPod("p1"), 8, true, false)

	// s2: scaled to zero (the pod goes without a deletionTimestamp first)
	// with no drain: a violation. Its runtime's expired turns peak at 5.
	podEvent("ns", "s2", runningPod("p2"), 10, false, false)
	sess("ns", "s2", 11, nil, withExpired(report("p2", "", lullv1.RuntimeServing, 0), 3))
	sess("ns", "s2", 12, nil, withExpired(report("p2", "", lullv1.RuntimeServing, 0), 5))
	sess("ns", "s2", 13, nil, withExpired(report("p2", "", lullv1.RuntimeServing, 0), 1)) // runtime restarted
	sess("ns", "s2", 13, nil, withExpired(report("p2", "", lullv1.RuntimeServing, 0), 9)) // a resync of a seen version: ignored
	podEvent("ns", "s2", runningPod("p2"), 14, false, true)

	// s3: a request ID withdrawn and issued again; the pod, never started,
	// removed from the store with no deletionTimestamp written first.
	reqB := request("p3", "update-b", 1)
	sess("ns", "s3", 20, reqB, nil)
	sess("ns", "s3", 21, nil, nil)
	sess("ns", "s3", 22, reqB, nil)
	podEvent("ns", "s3", pendingPod("p3"), 23, false, true)

	// Another namespace: not in this namespace's report.
	podEvent("other", "s4", runningPod("q"), 30, true, false)
	sess("other", "s4", 31, request("q", "update-c", 1), nil)
	sess("other", "s4", 32, request("q", "update-c", 2), nil)

	rep, err := a.Check(t.TempDir(), "ns")
	if err != nil {
		t.Fatal(err)
	}
	wantViolations(t, rep.Violations, []string{"pod ns/s2-0 (p2) was deleted", "request ID reused: drain request update-b for pod p3 of session ns/s3 reappeared"})
	if len(rep.Deletions) != 3 {
		t.Fatalf("deletions = %+v, want 3", rep.Deletions)
	}
	for _, d := range rep.Deletions {
		switch d.PodUID {
		case "p1":
			if !d.Drained || d.RequestID != "update-a" {
				t.Errorf("p1 = %+v, want drained for update-a", d)
			}
		case "p3":
			if !d.NeverStarted {
				t.Errorf("p3 = %+v, want never started", d)
			}
		}
	}
	if rep.ExpiredTurns != 7 {
		t.Errorf("expired turns = %d, want 7 (2 on p1, at most 5 on p2)", rep.ExpiredTurns)
	}
	all, err := a.Check(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Violations) != 4 || len(all.Deletions) != 4 {
		t.Errorf("all namespaces: %d violations %q, %d deletions; want 4 and 4", len(all.Violations), all.Violations, len(all.Deletions))
	}
}

func wantViolations(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("violations = %q, want %d", got, len(want))
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("violation %d = %q, want it to say %q", i, got[i], w)
		}
	}
}
