package bench

// What the bench reads of the controller process: its /metrics (requests,
// work queues, reconciles) and /proc (memory, CPU).

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// depthSampler scrapes the controller's work queue depth until stopped.
type depthSampler struct {
	done chan struct{}
	wg   sync.WaitGroup
	max  map[string]float64
}

// sampleQueueDepth starts scraping workqueue_depth from url every
// interval, keeping each controller's deepest queue (summed over
// priorities).
func sampleQueueDepth(url string, interval time.Duration) *depthSampler {
	s := &depthSampler{done: make(chan struct{}), max: map[string]float64{}}
	s.wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			if m, err := scrapeMetrics(url); err == nil {
				for ctrl, d := range m.Sum("workqueue_depth", "controller") {
					s.max[ctrl] = max(s.max[ctrl], d)
				}
			}
			select {
			case <-s.done:
				return
			case <-t.C:
			}
		}
	})
	return s
}

// stop ends the sampling and returns the deepest queue by controller.
func (s *depthSampler) stop() map[string]float64 {
	close(s.done)
	s.wg.Wait()
	return s.max
}

// requests returns lull_controller_api_requests_total by "VERB resource",
// with " (code)" added for refused requests; keep, if not nil, selects
// the verbs counted.
func requests(m Metrics, keep func(verb string) bool) map[string]float64 {
	out := map[string]float64{}
	for _, smp := range m.Samples("lull_controller_api_requests_total") {
		if keep != nil && !keep(smp.labels["verb"]) {
			continue
		}
		key := smp.labels["verb"] + " " + smp.labels["resource"]
		if !strings.HasPrefix(smp.labels["code"], "2") {
			key += " (" + smp.labels["code"] + ")"
		}
		out[key] += smp.value
	}
	return out
}

// writes returns the controller's write requests (POST, PUT, PATCH,
// DELETE), as requests does.
func writes(m Metrics) map[string]float64 {
	return requests(m, func(verb string) bool {
		switch verb {
		case "POST", "PUT", "PATCH", "DELETE":
			return true
		}
		return false
	})
}

// delta returns after − before for every key that grew.
func delta(after, before map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// histogramDelta returns the histogram name's observations between two
// scrapes, by label.
func histogramDelta(after, before Metrics, name, label string) map[string]Histogram {
	b := before.Histograms(name, label)
	out := map[string]Histogram{}
	for k, h := range after.Histograms(name, label) {
		if d := h.Sub(b[k]); d.Count() > 0 {
			out[k] = d
		}
	}
	return out
}

// peakRSS returns a process's VmHWM in bytes.
func peakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// cpuTime returns a process's user+system CPU time from /proc/<pid>/stat
// (fields 14 and 15, in clock ticks of 1/100 s).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields resume after ')'.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}
