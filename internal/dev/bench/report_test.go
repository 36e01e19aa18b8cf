package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/podprocess"
)

// passing is a run of 1,000 sessions that meets every target.
func passing() Result {
	return Result{
		Sessions: 1000, Replaced: 1000, Runtimes: podprocess.ModeFleet,
		Converge:       25 * time.Second,
		Raw:            RawRollout{Sets: 1000, Rollout: 20 * time.Second},
		Protocol:       ProtocolFloor{Sessions: 1000, Rollout: 22 * time.Second, Reported: 23 * time.Second},
		WatchFloor:     []time.Duration{2 * time.Millisecond, 5 * time.Millisecond},
		ReportToDelete: []time.Duration{100 * time.Millisecond, 900 * time.Millisecond},
		Writes:         map[string]float64{"DELETE pods": 1000, "PATCH statefulsets": 1000, "PATCH sessions/status": 1000, "POST events": 3000},
		PeakRSS:        29 << 20,
		IdleWindow:     time.Minute,
		IdleController: map[string]float64{},
		IdleRuntimes:   map[string]float64{},
	}
}

func missed(r Result) []string {
	var out []string
	for _, t := range r.Targets() {
		if !t.Met {
			out = append(out, t.Name)
		}
	}
	return out
}

func TestTargetsAllMet(t *testing.T) {
	if m := missed(passing()); len(m) != 0 {
		t.Errorf("missed %v", m)
	}
	var out bytes.Buffer
	if !passing().Print(&out) {
		t.Errorf("Print reported a miss:\n%s", out.String())
	}
	for _, want := range []string{"converge ÷ raw rollout:          1.25", "converge ÷ protocol floor:       1.14", "report→delete p99 ÷ write→watch p99: 180.0", "3.00 (plus 3.00 Events)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("printout lacks %q:\n%s", want, out.String())
		}
	}
}

// The controller's informers renewing their watches are its fixed cost,
// printed and not judged per session; a runtime's watch is its session's.
func TestControllerWatchRenewalsAreApart(t *testing.T) {
	r := passing()
	r.IdleController["WATCH statefulsets"] = 2
	if m := missed(r); len(m) != 0 {
		t.Errorf("missed %v with only the controller's watch renewals", m)
	}
	var out bytes.Buffer
	r.Print(&out)
	if !strings.Contains(out.String(), "and 2 watch renewals of its informers") {
		t.Errorf("printout does not show the watch renewals:\n%s", out.String())
	}
	r.IdleRuntimes["WATCH sessions"] = 1
	if m := missed(r); len(m) != 1 || m[0] != "runtime idle requests 0 /min/session" {
		t.Errorf("missed %v, want the runtimes' idle target missed by a runtime's watch", m)
	}
}

func TestTargetsEachMissed(t *testing.T) {
	for name, c := range map[string]struct {
		change func(*Result)
		want   string
	}{
		"slower than 1.25× raw":            {func(r *Result) { r.Converge = 25*time.Second + time.Millisecond }, "rollout ≤ 1.25× raw rollout"},
		"no raw rollout timed":             {func(r *Result) { r.Raw.Rollout = 0 }, "rollout ≤ 1.25× raw rollout"},
		"slower than 1.15× protocol floor": {func(r *Result) { r.Protocol.Rollout = 21 * time.Second }, "rollout ≤ 1.15× protocol floor"},
		"no protocol floor timed":          {func(r *Result) { r.Protocol.Rollout = 0 }, "rollout ≤ 1.15× protocol floor"},
		"report→delete p99 > 1s":           {func(r *Result) { r.ReportToDelete[1] = 1001 * time.Millisecond }, "Drained report → delete p99 ≤ 1s"},
		"no Drained report":                {func(r *Result) { r.ReportToDelete = nil }, "Drained report → delete p99 ≤ 1s"},
		"a fourth write":                   {func(r *Result) { r.Writes["PATCH sessions/status (409)"] = 1 }, "≤ 3 controller writes per replaced session"},
		"RSS over budget":                  {func(r *Result) { r.PeakRSS = 30<<20 + 1 }, "controller peak RSS ≤ 30.0 MiB (30 MiB × max(N,1000)/1000)"},
		"a controller idle GET":            {func(r *Result) { r.IdleController["GET pods"] = 1 }, "controller idle requests 0 /min/session (watch renewals apart)"},
		"a runtime idle heartbeat":         {func(r *Result) { r.IdleRuntimes["PATCH sessions/status"] = 1000 }, "runtime idle requests 0 /min/session"},
		"a session not replaced":           {func(r *Result) { r.Replaced, r.Writes = 999, map[string]float64{"DELETE pods": 999} }, "every session replaced"},
		"a protocol violation":             {func(r *Result) { r.Violations = []string{"x"} }, "no protocol violation"},
	} {
		t.Run(name, func(t *testing.T) {
			r := passing()
			c.change(&r)
			if m := missed(r); len(m) != 1 || m[0] != c.want {
				t.Errorf("missed %q, want only %q", m, c.want)
			}
			var out bytes.Buffer
			if r.Print(&out) {
				t.Error("Print reported every target met")
			}
			if !strings.Contains(out.String(), "MISSED") {
				t.Errorf("printout does not say MISSED:\n%s", out.String())
			}
		})
	}
}

func TestRuntimeIdleTargetOnlyWhenCounted(t *testing.T) {
	r := passing()
	r.IdleRuntimes, r.Runtimes = nil, podprocess.ModeProcess
	for _, tg := range r.Targets() {
		if strings.HasPrefix(tg.Name, "runtime idle") {
			t.Errorf("runtime idle target judged without a count: %+v", tg)
		}
	}
}

func TestIdlePerMinutePerSession(t *testing.T) {
	r := passing()
	r.IdleWindow = 30 * time.Second
	// 1,000 refresh patches in half a minute from 1,000 sessions: 2 a
	// minute each.
	if got := r.IdlePerMinute(map[string]float64{"PATCH sessions/status": 600, "WATCH sessions": 400}); got != 2 {
		t.Errorf("%v /min/session, want 2", got)
	}
}

func TestRSSBudget(t *testing.T) {
	for n, want := range map[int]int64{20: 30 << 20, 1000: 30 << 20, 5000: 150 << 20} {
		if got := RSSBudget(n); got != want {
			t.Errorf("RSSBudget(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestDefaultTimeoutScales(t *testing.T) {
	if DefaultTimeout(200) != 10*time.Minute || DefaultTimeout(5000) != 30*time.Minute {
		t.Errorf("DefaultTimeout(200) = %s, (5000) = %s", DefaultTimeout(200), DefaultTimeout(5000))
	}
}

// A runtime's report counts as settled once its one turn is written: its
// first report, written before the turn's activity, still has a write to
// come (coalesced, up to the report refresh later).
func TestSettledReportWaitsForTheTurnsActivity(t *testing.T) {
	at := metav1.Now()
	for _, c := range []struct {
		name string
		r    *lullv1.RuntimeReport
		want bool
	}{
		{"no report", nil, false},
		{"another pod's", &lullv1.RuntimeReport{PodUID: "old", LastActivity: &at}, false},
		{"first report, before the turn's activity", &lullv1.RuntimeReport{PodUID: "p"}, false},
		{"in the turn", &lullv1.RuntimeReport{PodUID: "p", ActiveTurns: 1, LastActivity: &at}, false},
		{"the turn written", &lullv1.RuntimeReport{PodUID: "p", LastActivity: &at}, true},
	} {
		if got := settledReport(c.r, "p"); got != c.want {
			t.Errorf("%s: settled = %v, want %v", c.name, got, c.want)
		}
	}
}
