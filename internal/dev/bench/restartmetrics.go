package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// controllerMetrics is one read of the controller's /metrics, by metric
// family name.
type controllerMetrics map[string]*dto.MetricFamily

// readControllerMetrics reads a Prometheus text endpoint.
func readControllerMetrics(ctx context.Context, url string) (controllerMetrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseControllerMetrics(resp.Body)
}

func parseControllerMetrics(r io.Reader) (controllerMetrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	m, err := p.TextToMetricFamilies(r)
	return controllerMetrics(m), err
}

// counter sums the counter name's samples by key(labels); a sample whose
// key is "" is left out.
func (m controllerMetrics) counter(name string, key func(labels map[string]string) string) Tally {
	out := Tally{}
	f := m[name]
	if f == nil {
		return out
	}
	for _, s := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range s.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if k := key(labels); k != "" {
			out[k] += s.GetCounter().GetValue()
		}
	}
	return out
}

// writes is the controller's write requests (POST, PUT, PATCH, DELETE)
// from lull_controller_api_requests_total, by "VERB resource", with
// " (code)" added for refused ones.
func (m controllerMetrics) writes() Tally {
	return m.counter("lull_controller_api_requests_total", func(l map[string]string) string {
		switch l["verb"] {
		case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		default:
			return ""
		}
		k := l["verb"] + " " + l["resource"]
		if !strings.HasPrefix(l["code"], "2") {
			k += " (" + l["code"] + ")"
		}
		return k
	})
}

// statusWrites is lull_session_status_writes_total by reason.
func (m controllerMetrics) statusWrites() Tally {
	return m.counter("lull_session_status_writes_total", func(l map[string]string) string { return l["reason"] })
}

// reconciles is how many reconciles of the named controller completed,
// whatever their result (controller_runtime_reconcile_total).
func (m controllerMetrics) reconciles(controller string) float64 {
	return m.counter("controller_runtime_reconcile_total", func(l map[string]string) string {
		if l["controller"] != controller {
			return ""
		}
		return controller
	})[controller]
}

// residentSet returns a process's current (VmRSS) and peak (VmHWM)
// resident set from /proc/<pid>/status, in bytes.
func residentSet(pid int) (rss, peak int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	found := 0
	for _, line := range strings.Split(string(b), "\n") {
		name, value, _ := strings.Cut(line, ":")
		var dst *int64
		switch name {
		case "VmRSS":
			dst = &rss
		case "VmHWM":
			dst = &peak
		default:
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(value), "kB")), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/status %s: %w", pid, name, err)
		}
		*dst = kb * 1024
		found++
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("no VmRSS and VmHWM in /proc/%d/status", pid)
	}
	return rss, peak, nil
}
