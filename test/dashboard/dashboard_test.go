package dashboard

import (
	"reflect"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`histogram_quantile(0.99, sum by (le, template) (rate(lull_x_seconds_bucket{namespace=~"$namespace", template=~"${template}"}[$__rate_interval])))`, []string{"lull_x_seconds_bucket"}},
		{`sum(a_total) / clamp_min(sum(b) + on() group_left c{d="e"}, 1)`, []string{"a_total", "b", "c"}},
		{`{__name__="by_name", job="x"}`, []string{"by_name"}},
		{`label_replace(up, "dst", "$1", "src", "(.*)") or vector(0)`, []string{"up"}},
		{`increase(x_total[${__range}] offset 1h)`, []string{"x_total"}},
	} {
		got, err := MetricNames(tc.expr)
		if err != nil {
			t.Errorf("MetricNames(%q): %v", tc.expr, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("MetricNames(%q) = %v, want %v", tc.expr, got, tc.want)
		}
	}
	if _, err := MetricNames(`sum(rate(x[5m])`); err == nil {
		t.Error("MetricNames of an unbalanced expression: no error")
	}
}

// families registers one metric of each type and gathers them, as the
// controller's /metrics exposes them.
func families(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(
		prometheus.NewCounter(prometheus.CounterOpts{Name: "c_total", Help: "c"}),
		prometheus.NewGauge(prometheus.GaugeOpts{Name: "g", Help: "g"}),
		prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h_seconds", Help: "h"}),
		prometheus.NewSummary(prometheus.SummaryOpts{Name: "s_seconds", Help: "s"}),
	)
	got, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range got {
		out[f.GetName()] = f
	}
	return out
}

func TestFamily(t *testing.T) {
	fs := families(t)
	for name, want := range map[string]string{
		"c_total": "c_total", "g": "g", "h_seconds_bucket": "h_seconds", "h_seconds_sum": "h_seconds", "h_seconds_count": "h_seconds",
		"s_seconds_sum": "s_seconds", "s_seconds_count": "s_seconds",
		"c": "", "c_total_count": "", "g_bucket": "", "g_count": "", "s_seconds_bucket": "", "h_seconds_total": "", "h": "", "missing": "",
	} {
		got, ok := Family(name, fs)
		if got != want || ok != (want != "") {
			t.Errorf("Family(%q) = %q, %v; want %q, %v", name, got, ok, want, want != "")
		}
	}
}

// Missing reads targets in rows and query variables, and names where each
// unserved metric is queried.
func TestMissing(t *testing.T) {
	model := []byte(`{
	  "templating": {"list": [
	    {"name": "datasource", "type": "datasource", "query": "prometheus"},
	    {"name": "ns", "type": "query", "query": {"query": "label_values(g{x=\"y\"}, namespace)", "refId": "v"}},
	    {"name": "old", "type": "query", "query": "label_values(gone_gauge, namespace)"},
	    {"name": "labels", "type": "query", "query": "label_values(namespace)"}
	  ]},
	  "panels": [
	    {"type": "timeseries", "title": "ok", "targets": [{"refId": "A", "expr": "rate(c_total[$__rate_interval])"}]},
	    {"type": "row", "title": "r", "panels": [
	      {"type": "timeseries", "title": "nested", "targets": [
	        {"refId": "A", "expr": "histogram_quantile(0.5, sum by (le) (rate(h_seconds_bucket[5m])))"},
	        {"refId": "B", "expr": "sum(rate(c_bucket[5m]))"},
	        {"refId": "C", "expr": ""}
	      ]}
	    ]}
	  ]
	}`)
	got, err := Missing(model, families(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`panel "nested" target B: c_bucket`, `variable "old": gone_gauge`}
	slices.Sort(got)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Missing = %q, want %q", got, want)
	}

	if _, err := Missing([]byte(`{"panels": [{"title": "bad", "targets": [{"refId": "A", "expr": "sum(("}]}]}`), nil); err == nil {
		t.Error("Missing of a dashboard with an unparsable expr: no error")
	}
}
