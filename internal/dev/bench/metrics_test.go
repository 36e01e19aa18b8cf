package bench

import (
	"math"
	"strings"
	"testing"
)

// A scrape as controller-runtime v0.25 and lull's manager expose it.
const scrapeText = `# HELP workqueue_depth Current depth of workqueue
# TYPE workqueue_depth gauge
workqueue_depth{controller="session",name="session",priority=""} 7
workqueue_depth{controller="session",name="session",priority="-100"} 5
workqueue_depth{controller="sessiontemplate",name="sessiontemplate",priority=""} 1
# HELP lull_controller_api_requests_total Requests.
# TYPE lull_controller_api_requests_total counter
lull_controller_api_requests_total{code="200",resource="sessions/status",verb="PATCH"} 10
lull_controller_api_requests_total{code="409",resource="sessions/status",verb="PATCH"} 2
lull_controller_api_requests_total{code="200",resource="pods",verb="DELETE"} 4
lull_controller_api_requests_total{code="200",resource="pods",verb="GET"} 9
lull_controller_api_requests_total{code="201",resource="events",verb="POST"} 3
# HELP controller_runtime_reconcile_time_seconds Length of time per reconciliation per controller
# TYPE controller_runtime_reconcile_time_seconds histogram
controller_runtime_reconcile_time_seconds_bucket{controller="session",le="0.005"} 50
controller_runtime_reconcile_time_seconds_bucket{controller="session",le="0.01"} 90
controller_runtime_reconcile_time_seconds_bucket{controller="session",le="0.1"} 99
controller_runtime_reconcile_time_seconds_bucket{controller="session",le="1"} 100
controller_runtime_reconcile_time_seconds_bucket{controller="session",le="+Inf"} 100
controller_runtime_reconcile_time_seconds_sum{controller="session"} 1.5
controller_runtime_reconcile_time_seconds_count{controller="session"} 100
`

func TestParseMetricsSumsGaugesAcrossPriorities(t *testing.T) {
	m, err := ParseMetrics(strings.NewReader(scrapeText))
	if err != nil {
		t.Fatal(err)
	}
	got := m.Sum("workqueue_depth", "controller")
	if got["session"] != 12 || got["sessiontemplate"] != 1 || len(got) != 2 {
		t.Errorf("depth by controller %v, want session 12, sessiontemplate 1", got)
	}
	if s := m.Samples("controller_runtime_reconcile_time_seconds"); s != nil {
		t.Errorf("a histogram read as samples: %v", s)
	}
	if s := m.Samples("no_such_metric"); s != nil {
		t.Errorf("a missing metric read as %v", s)
	}
}

func TestWritesByVerbAndResourceRefusalsApart(t *testing.T) {
	m, err := ParseMetrics(strings.NewReader(scrapeText))
	if err != nil {
		t.Fatal(err)
	}
	got := writes(m)
	want := map[string]float64{"PATCH sessions/status": 10, "PATCH sessions/status (409)": 2, "DELETE pods": 4, "POST events": 3}
	if len(got) != len(want) {
		t.Fatalf("writes %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if all := requests(m, nil); all["GET pods"] != 9 {
		t.Errorf("all requests %v: want GET pods 9", all)
	}
}

func TestHistogramQuantileIsTheBucketBound(t *testing.T) {
	m, err := ParseMetrics(strings.NewReader(scrapeText))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Histograms("controller_runtime_reconcile_time_seconds", "controller")["session"]
	for _, c := range []struct{ q, want float64 }{
		{0.5, 0.005}, // the 50th of 100 is in the first bucket
		{0.51, 0.01},
		{0.9, 0.01},
		{0.99, 0.1},
		{1, 1},
	} {
		if got, ok := h.Quantile(c.q); !ok || got != c.want {
			t.Errorf("q%.2f = %v (ok %v), want %v", c.q, got, ok, c.want)
		}
	}
	if _, ok := (Histogram{}).Quantile(0.99); ok {
		t.Error("an empty histogram has a quantile")
	}
}

func TestHistogramSubIsTheInterval(t *testing.T) {
	before := Histogram{Counts: map[float64]float64{0.01: 10, 1: 10, math.Inf(1): 10}}
	after := Histogram{Counts: map[float64]float64{0.01: 10, 1: 19, math.Inf(1): 20}}
	d := after.Sub(before)
	if d.Count() != 10 {
		t.Fatalf("count %v, want 10", d.Count())
	}
	// Of the 10 new observations, none ≤ 10 ms, 9 ≤ 1 s, one beyond.
	if q, _ := d.Quantile(0.5); q != 1 {
		t.Errorf("p50 bound %v, want 1", q)
	}
	if q, _ := d.Quantile(0.99); !math.IsInf(q, 1) {
		t.Errorf("p99 bound %v, want +Inf", q)
	}
}
