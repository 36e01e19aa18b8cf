package bench

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

func TestCompareRequests(t *testing.T) {
	before := DrainSnapshot{
		"kept":      {PodUID: "p1", ID: "Update-1"},
		"reissued":  {PodUID: "p2", ID: "Update-2"},
		"withdrawn": {PodUID: "p3", ID: "Update-3"},
		"moved":     {PodUID: "p4", ID: "Update-4"},
		"retarget":  {PodUID: "p5", ID: "Update-5"},
	}
	after := DrainSnapshot{
		"kept":     {PodUID: "p1", ID: "Update-1"},
		"reissued": {PodUID: "p2", ID: "Update-2b"},
		"retarget": {PodUID: "other", ID: "Update-5"},
		"issued":   {PodUID: "p6", ID: "Update-6"},
	}
	pods := map[string]string{"kept": "p1", "reissued": "p2", "withdrawn": "p3", "moved": "p4-new", "retarget": "p5", "issued": "p6"}
	got := CompareRequests(before, after, pods)
	want := RequestChanges{
		Kept:      []string{"kept"},
		Reissued:  []string{"reissued", "retarget"},
		Withdrawn: []string{"withdrawn"},
		Moved:     []string{"moved"},
		Issued:    []string{"issued"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CompareRequests:\n got %+v\nwant %+v", got, want)
	}
	// A pod gone since (a session without a running pod) moved on.
	if got := CompareRequests(DrainSnapshot{"a": {PodUID: "p", ID: "x"}}, DrainSnapshot{}, nil); len(got.Moved) != 1 || len(got.Withdrawn) != 0 {
		t.Errorf("request for a pod gone: %+v", got)
	}
}

func TestSnapshotDrains(t *testing.T) {
	sessions := []lullv1.Session{
		{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Status: lullv1.SessionStatus{Drain: &lullv1.DrainRequest{RequestID: "Update-1", PodUID: "p1"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b"}},
	}
	want := DrainSnapshot{"a": {PodUID: "p1", ID: "Update-1"}}
	if got := SnapshotDrains(sessions); !reflect.DeepEqual(got, want) {
		t.Errorf("SnapshotDrains = %v, want %v", got, want)
	}
}

func TestWriteGroups(t *testing.T) {
	session, template, events := WriteGroups(Tally{
		"PATCH sessions/status":         2,
		"PATCH sessions/status (409)":   1,
		"DELETE pods":                   1,
		"PATCH sessiontemplates/status": 3,
		"POST events":                   4,
		"PATCH events":                  1,
	})
	if want := (Tally{"PATCH sessions/status": 2, "PATCH sessions/status (409)": 1, "DELETE pods": 1}); !reflect.DeepEqual(session, want) {
		t.Errorf("session writes %v, want %v", session, want)
	}
	if want := (Tally{"PATCH sessiontemplates/status": 3}); !reflect.DeepEqual(template, want) {
		t.Errorf("template writes %v, want %v", template, want)
	}
	if events.Total() != 5 {
		t.Errorf("events %v, want 5 in all", events)
	}
}

func TestRestartChecks(t *testing.T) {
	clean := RestartResult{Sessions: 10, MidDrain: 2, AllReconciled: time.Second,
		Writes:       Tally{"PATCH sessiontemplates/status": 1, "POST events": 2},
		StatusWrites: Tally{},
		Requests:     RequestChanges{Kept: []string{"a", "b"}}}
	var out bytes.Buffer
	if !clean.Print(&out) {
		t.Errorf("template status and Events must not miss a target:\n%s", out.String())
	}
	for _, c := range clean.Checks() {
		if !c.OK {
			t.Errorf("clean run: %s missed", c.Name)
		}
	}
	for name, tc := range map[string]struct {
		r      func(*RestartResult)
		missed string
	}{
		"status rewrite":  {func(r *RestartResult) { r.StatusWrites = Tally{"Draining": 1}; r.Writes["PATCH sessions/status"] = 1 }, "0 session status writes on start-up"},
		"statefulset":     {func(r *RestartResult) { r.Writes["PATCH statefulsets"] = 1 }, "0 writes to sessions' objects on start-up"},
		"refused write":   {func(r *RestartResult) { r.Writes["PATCH sessions/status (409)"] = 1 }, "0 writes to sessions' objects on start-up"},
		"new ID":          {func(r *RestartResult) { r.Requests.Reissued = []string{"a"} }, "0 drain requests re-issued with a new ID"},
		"withdrawn":       {func(r *RestartResult) { r.Requests.Withdrawn = []string{"a"} }, "0 drain requests withdrawn"},
		"beyond the wave": {func(r *RestartResult) { r.Requests.Issued = []string{"c"} }, "0 drain requests issued beyond the wave"},
		"never caught up": {func(r *RestartResult) { r.AllReconciled = 0 }, "every session reconciled within the window"},
	} {
		r := clean
		r.Writes = Tally{}
		for k, v := range clean.Writes {
			r.Writes[k] = v
		}
		tc.r(&r)
		var missed []string
		for _, c := range r.Checks() {
			if !c.OK {
				missed = append(missed, c.Name)
			}
		}
		if len(missed) == 0 || missed[0] != tc.missed {
			t.Errorf("%s: missed %q, want %q first", name, missed, tc.missed)
		}
		out.Reset()
		if r.Print(&out) || !strings.Contains(out.String(), tc.missed) || !strings.Contains(out.String(), "MISSED") {
			t.Errorf("%s: Print must report the miss:\n%s", name, out.String())
		}
	}
}

func TestControllerMetrics(t *testing.T) {
	const text = `# HELP lull_controller_api_requests_total Requests.
# TYPE lull_controller_api_requests_total counter
lull_controller_api_requests_total{code="200",resource="sessions/status",verb="PATCH"} 3
lull_controller_api_requests_total{code="409",resource="sessions/status",verb="PATCH"} 1
lull_controller_api_requests_total{code="200",resource="pods",verb="GET"} 7
lull_controller_api_requests_total{code="201",resource="events",verb="POST"} 2
# HELP lull_session_status_writes_total Writes.
# TYPE lull_session_status_writes_total counter
lull_session_status_writes_total{reason="DrainRequested"} 4
# HELP controller_runtime_reconcile_total Reconciles.
# TYPE controller_runtime_reconcile_total counter
controller_runtime_reconcile_total{controller="session",result="success"} 40
controller_runtime_reconcile_total{controller="session",result="requeue_after"} 2
controller_runtime_reconcile_total{controller="sessiontemplate",result="success"} 9
`
	m, err := parseControllerMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Tally{"PATCH sessions/status": 3, "PATCH sessions/status (409)": 1, "POST events": 2}); !reflect.DeepEqual(m.writes(), want) {
		t.Errorf("writes %v, want %v", m.writes(), want)
	}
	if want := (Tally{"DrainRequested": 4}); !reflect.DeepEqual(m.statusWrites(), want) {
		t.Errorf("status writes %v, want %v", m.statusWrites(), want)
	}
	if got := m.reconciles("session"); got != 42 {
		t.Errorf("session reconciles %v, want 42", got)
	}
	if got := (controllerMetrics{}).writes(); len(got) != 0 {
		t.Errorf("no metric yet: %v", got)
	}
}

func TestMidDrain(t *testing.T) {
	drain := func(name, pod string) lullv1.Session {
		return lullv1.Session{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: lullv1.SessionStatus{PodUID: "p-" + types.UID(name),
			Drain: &lullv1.DrainRequest{RequestID: "Update-" + name, PodUID: types.UID(pod)}}}
	}
	idle := lullv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Status: lullv1.SessionStatus{PodUID: "p-c"}}
	ok := []lullv1.Session{drain("a", "p-a"), drain("b", "p-b"), idle}
	if err := midDrain(2)(ok); err != nil {
		t.Errorf("two outstanding: %v", err)
	}
	if err := midDrain(3)(ok); err == nil {
		t.Error("want 3, two outstanding: no error")
	}
	drained := drain("a", "p-a")
	drained.Status.Runtime = &lullv1.RuntimeReport{PodUID: "p-a", State: lullv1.RuntimeDrained}
	if err := midDrain(2)([]lullv1.Session{drained, drain("b", "p-b")}); err == nil || !strings.Contains(err.Error(), "drained") {
		t.Errorf("a drained runtime: %v", err)
	}
	if err := midDrain(1)([]lullv1.Session{drain("a", "old")}); err == nil {
		t.Error("a request for another pod: no error")
	}
}
