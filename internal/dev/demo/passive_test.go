package demo

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

func TestUsersSplitSessions(t *testing.T) {
	for _, tt := range []struct {
		n    int
		want [3]int // one turn, four turns, working
	}{{1, [3]int{0, 0, 1}}, {2, [3]int{1, 0, 1}}, {4, [3]int{2, 1, 1}}, {12, [3]int{5, 4, 3}}, {13, [3]int{5, 5, 3}}} {
		us := users(tt.n)
		var got [3]int
		for i, u := range us {
			got[i] = u.n
		}
		if got != tt.want {
			t.Errorf("users(%d) = %v, want %v", tt.n, got, tt.want)
		}
		if us[2].turns != 0 || us[0].turns == 0 || us[1].turns == 0 {
			t.Errorf("users(%d): the last kind keeps working, the others leave: %+v", tt.n, us)
		}
	}
	if got := users(12)[1].String(); got != "4 leave after 4 turns" {
		t.Errorf("String() = %q", got)
	}
}

func TestPassiveTemplate(t *testing.T) {
	o := Defaults()
	tp := passiveTemplate(o, user{template: "one-turn", turns: 1, n: 3}, "img:v1")
	if tp.Spec.UpdatePolicy.Strategy != lullv1.UpdateStrategyPassive || tp.Spec.Idle.SuspendAfter.Duration != o.IdleSuspendAfter || tp.Spec.MaxLifetime.Duration != o.MaxLifetime {
		t.Errorf("spec %+v", tp.Spec)
	}
	args := tp.RuntimeContainer().Args
	if !contains(args, "--turns=1") || !contains(args, "--report-refresh=2s") {
		t.Errorf("args %q", args)
	}
	for _, a := range passiveTemplate(o, user{template: "working"}, "img:v1").RuntimeContainer().Args {
		if len(a) > 8 && a[:8] == "--turns=" {
			t.Errorf("a user who keeps working has %s", a)
		}
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func TestHistoryCount(t *testing.T) {
	before := []view{
		{Name: "new", Template: "a", Pod: "old-a"}, {Name: "stale", Template: "a", Pod: "old-a"}, {Name: "suspending", Template: "a", Pod: "old-a"},
		{Name: "waiting", Template: "b", Pod: "old-b"}, {Name: "resuming", Template: "b", Pod: "old-b"}, {Name: "left-again", Template: "b", Pod: "old-b"},
		{Name: "restarting", Template: "b", Pod: "old-b"}, {Name: "unseen", Template: "b", Pod: "old-b"},
	}
	h := newHistory(before)
	h.see([]view{{Name: "left-again", Template: "b", Pod: "new-b", Set: "new-b"}}, time.Unix(0, 0), 0)
	h.resume("resuming")
	views := []view{
		{Name: "new", Template: "a", Pod: "new-a", Set: "new-a"},
		{Name: "stale", Template: "a", Pod: "old-a", Set: "new-a", Drain: lullv1.DrainReasonLifetime},
		{Name: "suspending", Template: "a", Suspend: true, Pod: "old-a", Set: "new-a", Drain: lullv1.DrainReasonIdle},
		{Name: "waiting", Template: "b", Suspend: true, Suspended: true, Set: "new-b"},
		{Name: "resuming", Template: "b", Set: "new-b"},
		{Name: "left-again", Template: "b", Suspend: true, Suspended: true, Set: "new-b"},
		{Name: "restarting", Template: "b", Set: "new-b"},
		{Name: "unseen", Template: "b", Suspend: true, Suspended: true, Set: "old-b"},
	}
	got := h.count(views)
	want := tally{Sessions: 8, Converged: 3, Suspended: 3, Draining: 2}
	if got != want {
		t.Errorf("count = %+v, want %+v", got, want)
	}
	if got.Done() {
		t.Error("done with stale sessions")
	}
	if line := got.line(); line != "    3/8 on the new revision, 3 suspended, 2 draining" {
		t.Errorf("line %q", line)
	}
	if done := h.count([]view{views[0], views[4], views[5]}); !done.Done() {
		t.Errorf("not done: %+v", done)
	}
	// Once its pod runs, a resumed session is no longer resuming: while
	// its pod is replaced, it has not converged.
	h.see([]view{{Name: "resuming", Template: "b", Pod: "new-b", Set: "new-b"}}, time.Unix(0, 0), 0)
	if c := h.count([]view{views[4]}); c.Converged != 0 {
		t.Errorf("a session starting a pod the demo did not resume has converged: %+v", c)
	}
}

func TestHistorySee(t *testing.T) {
	t0 := time.Unix(1000, 0)
	h := newHistory([]view{{Name: "s", Template: "a", Pod: "old"}, {Name: "t", Template: "a", Pod: "old"}, {Name: "u", Template: "a", Pod: "old"}})
	views := []view{
		{Name: "s", Template: "a", Suspend: true, Suspended: true, Set: "new"},
		{Name: "t", Template: "a", Suspend: true, Pod: "old", Drain: lullv1.DrainReasonIdle},
		{Name: "u", Template: "a", Pod: "old", Drain: lullv1.DrainReasonLifetime},
	}
	if due := h.see(views, t0, 3*time.Second); len(due) != 0 {
		t.Errorf("due at once: %v", due)
	}
	if due := h.see(views, t0.Add(3*time.Second), 3*time.Second); !reflect.DeepEqual(due, []string{"s"}) {
		t.Errorf("due after 3s: %v", due)
	}
	h.resume("s")
	if h.Suspensions != 1 || h.Resumes != 1 {
		t.Errorf("suspensions %d resumes %d", h.Suspensions, h.Resumes)
	}
	// s runs the new revision, then is suspended again: its user stays
	// away. u is resumed by someone else before its user comes back.
	h.see([]view{{Name: "s", Template: "a", Pod: "new", Set: "new"}, {Name: "u", Template: "a", Suspend: true, Suspended: true, Set: "new"}}, t0.Add(4*time.Second), 3*time.Second)
	h.see([]view{{Name: "u", Template: "a", Set: "new"}}, t0.Add(5*time.Second), 3*time.Second)
	if len(h.waiting) != 0 {
		t.Errorf("waiting %v", h.waiting)
	}
	again := []view{{Name: "s", Template: "a", Suspend: true, Suspended: true, Set: "new"}}
	if due := h.see(again, t0.Add(10*time.Second), 0); len(due) != 0 || h.Suspensions != 3 {
		t.Errorf("suspended on the new revision: due %v, suspensions %d", due, h.Suspensions)
	}
	if h.Restarts != 0 {
		t.Errorf("a resumed session counted as restarted: %d", h.Restarts)
	}
}

func TestHistoryRestarts(t *testing.T) {
	h := newHistory([]view{{Name: "w", Template: "a", Pod: "old"}, {Name: "f", Template: "a", Pod: "old"}})
	h.see([]view{{Name: "w", Template: "a", Pod: "old", Drain: lullv1.DrainReasonLifetime}, {Name: "f", Template: "a", Pod: "old"}}, time.Unix(0, 0), 0)
	h.see([]view{{Name: "w", Template: "a", Set: "new"}, {Name: "f", Template: "a", Pod: "new", Set: "new"}}, time.Unix(1, 0), 0)
	h.see([]view{{Name: "w", Template: "a", Pod: "new", Set: "new"}, {Name: "f", Template: "a", Pod: "new", Set: "new"}}, time.Unix(2, 0), 0)
	if h.Restarts != 2 {
		t.Errorf("restarts %d, want 2 (one seen between its pods, one not)", h.Restarts)
	}
}

func TestWindow(t *testing.T) {
	at := func(s int) *metav1.Time { m := metav1.NewTime(time.Unix(1000+int64(s), 0)); return &m }
	tpl := func(name, rev string, stale, without int32, eta *metav1.Time) lullv1.SessionTemplate {
		t := lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 2}}
		t.Status = lullv1.SessionTemplateStatus{ObservedGeneration: 2, Revision: rev, Stale: stale, WithoutDeadline: without, ExpectedCompletion: eta}
		return t
	}
	old := map[string]string{"a": "old-a", "b": "old-b", "c": "old-c"}
	for _, tt := range []struct {
		name string
		ts   []lullv1.SessionTemplate
		want *metav1.Time
	}{
		{"latest of the templates", []lullv1.SessionTemplate{tpl("a", "new-a", 2, 0, at(30)), tpl("b", "new-b", 1, 0, at(90))}, at(90)},
		{"a template with nothing stale does not count", []lullv1.SessionTemplate{tpl("a", "new-a", 2, 0, at(30)), tpl("c", "new-c", 0, 0, nil)}, at(30)},
		{"a template not yet on its new revision", []lullv1.SessionTemplate{tpl("a", "new-a", 2, 0, at(30)), tpl("b", "old-b", 0, 0, nil)}, nil},
		{"a session without deadline", []lullv1.SessionTemplate{tpl("a", "new-a", 2, 1, nil), tpl("b", "new-b", 1, 0, at(90))}, nil},
		{"nothing stale anywhere", []lullv1.SessionTemplate{tpl("c", "new-c", 0, 0, nil)}, nil},
	} {
		eta, ok := window(tt.ts, old)
		if ok != (tt.want != nil) || (ok && !eta.Equal(tt.want.Time)) {
			t.Errorf("%s: window = %v %v, want %v", tt.name, eta, ok, tt.want)
		}
	}
	observedBehind := tpl("a", "new-a", 2, 0, at(30))
	observedBehind.Generation = 3
	if _, ok := window([]lullv1.SessionTemplate{observedBehind}, old); ok {
		t.Error("published for a generation the controller has not observed")
	}
}
