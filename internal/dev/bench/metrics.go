package bench

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is one scrape of a Prometheus text endpoint (the controller's
// /metrics), by metric family name.
type Metrics map[string]*dto.MetricFamily

// ParseMetrics reads the Prometheus text exposition format.
func ParseMetrics(r io.Reader) (Metrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	m, err := p.TextToMetricFamilies(r)
	return Metrics(m), err
}

// scrapeMetrics reads url's metrics.
func scrapeMetrics(url string) (Metrics, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	m, err := ParseMetrics(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	return m, nil
}

// sample is one counter, gauge or untyped sample.
type sample struct {
	labels map[string]string
	value  float64
}

// Samples returns the samples of the counter, gauge or untyped metric
// name; none for a histogram or a name not exposed.
func (m Metrics) Samples(name string) []sample {
	mf := m[name]
	if mf == nil {
		return nil
	}
	var out []sample
	for _, x := range mf.GetMetric() {
		s := sample{labels: labelsOf(x)}
		switch {
		case x.Counter != nil:
			s.value = x.Counter.GetValue()
		case x.Gauge != nil:
			s.value = x.Gauge.GetValue()
		case x.Untyped != nil:
			s.value = x.Untyped.GetValue()
		default:
			continue
		}
		out = append(out, s)
	}
	return out
}

// Sum adds the samples of name by the value of label ("" sums all under
// the key "").
func (m Metrics) Sum(name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range m.Samples(name) {
		out[s.labels[label]] += s.value
	}
	return out
}

// Histograms returns the histogram name summed by the value of label.
func (m Metrics) Histograms(name, label string) map[string]Histogram {
	mf := m[name]
	if mf == nil {
		return nil
	}
	out := map[string]Histogram{}
	for _, x := range mf.GetMetric() {
		h := x.GetHistogram()
		if h == nil {
			continue
		}
		key := labelsOf(x)[label]
		sum := out[key]
		if sum.Counts == nil {
			sum.Counts = map[float64]float64{}
		}
		for _, b := range h.GetBucket() {
			if !math.IsInf(b.GetUpperBound(), 1) {
				sum.Counts[b.GetUpperBound()] += float64(b.GetCumulativeCount())
			}
		}
		// The +Inf bucket, whether or not the text has it, is the count.
		sum.Counts[math.Inf(1)] += float64(h.GetSampleCount())
		out[key] = sum
	}
	return out
}

func labelsOf(x *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, p := range x.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

// Histogram is a classic Prometheus histogram: cumulative counts of
// observations ≤ each upper bound (seconds, for the latencies read here),
// +Inf included.
type Histogram struct {
	Counts map[float64]float64
}

// Sub returns the observations made since before (a scrape of the same
// histogram, earlier): the histogram of an interval.
func (h Histogram) Sub(before Histogram) Histogram {
	out := Histogram{Counts: map[float64]float64{}}
	for le, n := range h.Counts {
		out.Counts[le] = n - before.Counts[le]
	}
	return out
}

// Count is the number of observations.
func (h Histogram) Count() float64 { return h.Counts[math.Inf(1)] }

// Quantile returns the upper bound of the bucket that holds the q-th
// (0–1) observation by rank: at least that share of observations were ≤
// the bound. It is +Inf when that observation lies beyond the last finite
// bound, and ok is false when there are no observations. A bucket bound,
// not an interpolation: the figure is "≤ bound".
func (h Histogram) Quantile(q float64) (bound float64, ok bool) {
	total := h.Count()
	if total <= 0 {
		return 0, false
	}
	bounds := make([]float64, 0, len(h.Counts))
	for le := range h.Counts {
		bounds = append(bounds, le)
	}
	sort.Float64s(bounds)
	rank := math.Ceil(q * total)
	for _, le := range bounds {
		if h.Counts[le] >= rank {
			return le, true
		}
	}
	return math.Inf(1), true
}
