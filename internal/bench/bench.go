// Package bench measures a Drain rollout on the local control plane: many
// sessions whose runtimes are idle (so each drains at once), one runtime
// update, and the figures that say what the rollout cost: time to converge,
// API writes the controller issued per replaced session, latency from a
// runtime's Drained report to its pod's deletion, and the controller's peak
// memory and CPU.
package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/audit"
	"lull.dev/lull/internal/localenv"
	"lull.dev/lull/internal/podprocess"
	"lull.dev/lull/internal/scenario"
)

// Options shape the benchmark.
type Options struct {
	Namespace string
	Sessions  int
	Timeout   time.Duration
	Out       io.Writer
	// Runtimes is how the runtimes ran (the environment's mode); it is
	// printed with the figures.
	Runtimes podprocess.Mode
}

// Result holds the figures of one run.
type Result struct {
	Sessions int
	Runtimes podprocess.Mode
	Replaced int
	// Converge is from the template update to every session running a pod
	// at its new revision.
	Converge time.Duration
	// Writes counts the controller's write requests (POST, PUT, PATCH,
	// DELETE) during the rollout by "VERB resource".
	Writes map[string]float64
	// StatusWrites counts session status patches during the rollout by
	// the rollout reason that caused them.
	StatusWrites map[string]float64
	// ReportToDelete are the latencies from the first sight of a matching
	// Drained report to the first sight of the pod's deletion.
	ReportToDelete []time.Duration
	// PeakRSS is the controller's peak resident set (VmHWM), bytes.
	PeakRSS int64
	// CPU is the controller's user+system CPU time during the rollout.
	CPU        time.Duration
	Violations []string
}

// Run measures one rollout on env.
func Run(ctx context.Context, env *localenv.Env, o Options) (_ Result, err error) {
	defer func() { err = scenario.Interrupted(ctx, err) }()
	out := o.Out
	c, err := scenario.NewClient(env.Cluster.Config)
	if err != nil {
		return Result{}, err
	}
	auditor, err := audit.Start(ctx, env.Cluster.Config)
	if err != nil {
		return Result{}, err
	}
	// Turns of zero length, a long pause between them: an idle runtime,
	// which drains as soon as it is asked.
	tmpl := scenario.Template(o.Namespace, "bench", "example.com/lull/turnrunner:v1", "--turn-min=0s", "--turn-max=0s", "--think-max=1h")
	start := time.Now()
	names, err := scenario.Launch(ctx, c, tmpl, "b", o.Sessions)
	if err != nil {
		return Result{}, err
	}
	before, err := scenario.WaitFor(ctx, c, o.Namespace, names, time.Second, o.Timeout, progress(out, "starting", start, nil), scenario.Converged)
	if errors.Is(err, scenario.ErrInterrupted) {
		return Result{}, fmt.Errorf("start of the sessions %w", err)
	} else if err != nil {
		return Result{}, fmt.Errorf("sessions did not start: %w", err)
	}
	if err := waitReported(ctx, c, o.Namespace, names, before, o.Timeout); err != nil {
		return Result{}, err
	}
	fmt.Fprintf(out, "%d sessions running, every runtime connected (%s)\n", o.Sessions, time.Since(start).Round(time.Second))

	pid := env.ControllerPID()
	writes0, err := scrapeWrites(env.MetricsURL())
	if err != nil {
		return Result{}, err
	}
	status0, err := scrapeCounter(env.MetricsURL(), "lull_session_status_writes_total", "reason")
	if err != nil {
		return Result{}, err
	}
	cpu0, err := cpuTime(pid)
	if err != nil {
		return Result{}, err
	}
	start = time.Now()
	if err := scenario.SetImage(ctx, c, o.Namespace, "bench", "example.com/lull/turnrunner:v2"); err != nil {
		return Result{}, err
	}
	if _, err := scenario.WaitFor(ctx, c, o.Namespace, names, 250*time.Millisecond, o.Timeout, progress(out, "rolling out", start, &before), scenario.MovedFrom(before)); errors.Is(err, scenario.ErrInterrupted) {
		return Result{}, fmt.Errorf("rollout %w", err)
	} else if err != nil {
		return Result{}, fmt.Errorf("rollout did not converge: %w", err)
	}
	r := Result{Sessions: o.Sessions, Runtimes: o.Runtimes, Converge: time.Since(start)}
	// Let the last reconciles (status of the new pods) land before reading
	// the counters: they are part of the rollout's cost.
	if err := scenario.Sleep(ctx, 3*time.Second); err != nil {
		return Result{}, err
	}
	writes1, err := scrapeWrites(env.MetricsURL())
	if err != nil {
		return Result{}, err
	}
	status1, err := scrapeCounter(env.MetricsURL(), "lull_session_status_writes_total", "reason")
	if err != nil {
		return Result{}, err
	}
	r.StatusWrites = map[string]float64{}
	for k, v := range status1 {
		if d := v - status0[k]; d > 0 {
			r.StatusWrites[k] = d
		}
	}
	cpu1, err := cpuTime(pid)
	if err != nil {
		return Result{}, err
	}
	r.CPU = cpu1 - cpu0
	r.Writes = map[string]float64{}
	for k, v := range writes1 {
		if d := v - writes0[k]; d > 0 {
			r.Writes[k] = d
		}
	}
	if r.PeakRSS, err = peakRSS(pid); err != nil {
		return Result{}, err
	}
	rep, err := auditor.Check(env.Runner.JournalDir(), o.Namespace)
	if err != nil {
		return Result{}, err
	}
	r.Violations = rep.Violations
	for _, d := range rep.Deletions {
		r.Replaced++
		if d.Drained {
			r.ReportToDelete = append(r.ReportToDelete, d.At.Sub(d.DrainedAt))
		}
	}
	sort.Slice(r.ReportToDelete, func(i, j int) bool { return r.ReportToDelete[i] < r.ReportToDelete[j] })
	return r, nil
}

// waitReported waits until every session's runtime has reported for its
// current pod: the runtimes are connected and watching.
func waitReported(ctx context.Context, c client.Client, ns string, names []string, f scenario.Fleet, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var list lullv1.SessionList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		ready := 0
		for _, s := range list.Items {
			if r := s.Status.Runtime; r != nil && string(r.PodUID) == f.Pods[s.Name].UID {
				ready++
			}
		}
		if ready == len(names) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d runtimes reported within %s", ready, len(names), timeout)
		}
		if err := scenario.Sleep(ctx, time.Second); err != nil {
			return fmt.Errorf("%w with %d of %d runtimes reported", err, ready, len(names))
		}
	}
}

func progress(out io.Writer, what string, start time.Time, before *scenario.Fleet) func(scenario.Fleet) {
	last := ""
	return func(f scenario.Fleet) {
		n := f.Current
		if before != nil {
			n = 0
			for name, p := range f.Pods {
				if p.Revision != before.Pods[name].Revision {
					n++
				}
			}
		}
		line := fmt.Sprintf("%s: %d/%d done, %d draining", what, n, f.Sessions, f.Draining)
		if line != last {
			fmt.Fprintf(out, "%7.1fs %s\n", time.Since(start).Seconds(), line)
			last = line
		}
	}
}

// sample is one line of a counter vector on /metrics.
type sample struct {
	labels map[string]string
	value  float64
}

// scrape reads every sample of the counter name from a Prometheus text
// endpoint.
func scrape(url, name string) ([]sample, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out []sample
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), name+"{")
		if !ok {
			continue
		}
		labels, value, _ := strings.Cut(rest, "} ")
		n, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		smp := sample{labels: map[string]string{}, value: n}
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			smp.labels[k] = strings.Trim(v, `"`)
		}
		out = append(out, smp)
	}
	return out, sc.Err()
}

// scrapeWrites returns the controller's write requests from
// lull_controller_api_requests_total, by "VERB resource", with " (code)"
// added for refused requests.
func scrapeWrites(url string) (map[string]float64, error) {
	samples, err := scrape(url, "lull_controller_api_requests_total")
	out := map[string]float64{}
	for _, smp := range samples {
		switch smp.labels["verb"] {
		case "POST", "PUT", "PATCH", "DELETE":
		default:
			continue
		}
		key := smp.labels["verb"] + " " + smp.labels["resource"]
		if !strings.HasPrefix(smp.labels["code"], "2") {
			key += " (" + smp.labels["code"] + ")"
		}
		out[key] += smp.value
	}
	return out, err
}

// scrapeCounter sums a counter vector by one label.
func scrapeCounter(url, name, label string) (map[string]float64, error) {
	samples, err := scrape(url, name)
	out := map[string]float64{}
	for _, smp := range samples {
		out[smp.labels[label]] += smp.value
	}
	return out, err
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

func byKey(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.0f", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// Percentile returns the p-th percentile (0–100) of sorted durations, by
// the nearest-rank method.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(p/100*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

// Print writes the figures and checks them against the targets.
func (r Result) Print(w io.Writer) (ok bool) {
	total := 0.0
	keys := make([]string, 0, len(r.Writes))
	for k, v := range r.Writes {
		keys = append(keys, k)
		total += v
	}
	sort.Strings(keys)
	events := 0.0
	for k, v := range r.Writes {
		if strings.HasSuffix(strings.Fields(k)[1], "events") {
			events += v
		}
	}
	perSession := (total - events) / float64(max(r.Replaced, 1))
	p50, p99 := Percentile(r.ReportToDelete, 50), Percentile(r.ReportToDelete, 99)
	fmt.Fprintf(w, "\nrollout of %d sessions (Drain, idle runtimes, %s mode)\n", r.Sessions, r.Runtimes)
	fmt.Fprintf(w, "  pods replaced:                 %d\n", r.Replaced)
	fmt.Fprintf(w, "  time to converge:              %s\n", r.Converge.Round(100*time.Millisecond))
	fmt.Fprintf(w, "  controller writes / session:   %.2f (plus %.2f Events)\n", perSession, events/float64(max(r.Replaced, 1)))
	for _, k := range keys {
		fmt.Fprintf(w, "      %-28s %6.0f  (%.2f / session)\n", k, r.Writes[k], r.Writes[k]/float64(max(r.Replaced, 1)))
	}
	fmt.Fprintf(w, "  session status writes by reason: %s\n", byKey(r.StatusWrites))
	fmt.Fprintf(w, "  Drained report → delete:       p50 %s, p99 %s, max %s (n=%d)\n", p50.Round(time.Millisecond), p99.Round(time.Millisecond),
		Percentile(r.ReportToDelete, 100).Round(time.Millisecond), len(r.ReportToDelete))
	fmt.Fprintf(w, "  controller peak RSS:           %.1f MiB\n", float64(r.PeakRSS)/(1<<20))
	fmt.Fprintf(w, "  controller CPU during rollout: %s\n", r.CPU)
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  VIOLATION: %s\n", v)
	}
	checks := []struct {
		name string
		ok   bool
	}{
		{"p99 report-to-delete < 1s", p99 < time.Second},
		// A drained replacement costs a DELETE, a PATCH of the StatefulSet
		// and three status patches (request, commitment, new pod running):
		// 5, plus the template's status and the odd conflict.
		{"≤ 5.25 controller writes per replaced session", perSession <= 5.25},
		{"converge in < 90s", r.Converge < 90*time.Second},
		{"every session replaced", r.Replaced >= r.Sessions},
		{"no protocol violation", len(r.Violations) == 0},
	}
	ok = true
	fmt.Fprintf(w, "targets\n")
	for _, c := range checks {
		mark := "met"
		if !c.ok {
			mark, ok = "MISSED", false
		}
		fmt.Fprintf(w, "  %-44s %s\n", c.name, mark)
	}
	return ok
}
