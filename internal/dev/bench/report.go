package bench

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"
)

// Targets of fleet scale (docs/benchmarks.md).
const (
	// MaxRolloutRatio bounds lull's converge over the raw rollout's time.
	MaxRolloutRatio = 1.25
	// MaxProtocolRatio bounds lull's converge over the protocol floor's
	// (ProtocolFloor.Rollout): what lull's controller may add to the
	// protocol's own writes.
	MaxProtocolRatio = 1.15
	// MaxReportToDeleteP99 bounds the Drained report → delete p99.
	MaxReportToDeleteP99 = time.Second
	// MaxWritesPerSession bounds the controller's writes (Events apart)
	// per replaced session.
	MaxWritesPerSession = 3.0
	// RSSPer1000 is the controller's peak RSS allowed per 1,000 sessions,
	// bytes; fleets under 1,000 get the budget of 1,000 (RSSBudget).
	RSSPer1000 = 30 << 20
)

// RSSBudget is the controller's peak RSS allowed for n sessions, bytes:
// 30 MiB × max(n, 1000) / 1000. A Go controller's base (runtime, clients,
// schemes, caches' indexes) does not shrink with the fleet, so a small
// fleet is held to the budget of 1,000 sessions rather than a share that
// no process could meet.
func RSSBudget(n int) int64 { return int64(RSSPer1000) * int64(max(n, 1000)) / 1000 }

// Target is one figure checked against its bound.
type Target struct {
	Name, Figure string
	Met          bool
}

// writesPerSession returns the controller's writes per replaced session,
// Events apart, and its Events per replaced session.
func (r Result) writesPerSession() (writes, events float64) {
	total := 0.0
	for k, v := range r.Writes {
		total += v
		if f := strings.Fields(k); len(f) > 1 && strings.HasSuffix(f[1], "events") {
			events += v
		}
	}
	n := float64(max(r.Replaced, 1))
	return (total - events) / n, events / n
}

// RolloutRatio is lull's converge over the raw rollout's time (0 when no
// raw rollout was timed).
func (r Result) RolloutRatio() float64 { return ratio(r.Converge, r.Raw.Rollout) }

// ProtocolRatio is lull's converge over the protocol floor's rollout (0
// when no protocol floor was timed).
func (r Result) ProtocolRatio() float64 { return ratio(r.Converge, r.Protocol.Rollout) }

// ReportToDeleteRatio is the Drained report → delete p99 over the API
// server's write→watch p99 (0 when no floor was timed).
func (r Result) ReportToDeleteRatio() float64 {
	return ratio(Percentile(r.ReportToDelete, 99), Percentile(r.WatchFloor, 99))
}

// splitWatches splits the controller's requests into its watches and the
// rest. The controller's watches are its informers', one per watched kind,
// each renewed every 5–10 minutes by client-go's reflector (a random
// timeout between minWatchTimeout and twice it): a cost of the process
// that does not grow with the sessions, which the idle target does not
// judge. A runtime's watch is its own session's, and is judged.
func splitWatches(requests map[string]float64) (others, watches map[string]float64) {
	others, watches = map[string]float64{}, map[string]float64{}
	for k, v := range requests {
		if strings.HasPrefix(k, "WATCH ") {
			watches[k] = v
		} else {
			others[k] = v
		}
	}
	return others, watches
}

// IdlePerMinute is requests per minute per session in the idle window.
func (r Result) IdlePerMinute(requests map[string]float64) float64 {
	if r.IdleWindow <= 0 || r.Sessions == 0 {
		return 0
	}
	return sum(requests) / r.IdleWindow.Minutes() / float64(r.Sessions)
}

// Targets checks the figures against the targets of fleet scale. The
// runtimes' idle requests are judged only when they were counted (fleet
// mode).
func (r Result) Targets() []Target {
	writes, _ := r.writesPerSession()
	p99 := Percentile(r.ReportToDelete, 99)
	own, _ := splitWatches(r.IdleController)
	t := []Target{
		{fmt.Sprintf("rollout ≤ %.2f× raw rollout", MaxRolloutRatio), fmt.Sprintf("%.2f×", r.RolloutRatio()),
			r.Raw.Rollout > 0 && r.RolloutRatio() <= MaxRolloutRatio},
		{fmt.Sprintf("rollout ≤ %.2f× protocol floor", MaxProtocolRatio), fmt.Sprintf("%.2f×", r.ProtocolRatio()),
			r.Protocol.Rollout > 0 && r.ProtocolRatio() <= MaxProtocolRatio},
		{fmt.Sprintf("Drained report → delete p99 ≤ %s", MaxReportToDeleteP99), p99.Round(time.Millisecond).String(),
			len(r.ReportToDelete) > 0 && p99 <= MaxReportToDeleteP99},
		{fmt.Sprintf("≤ %.0f controller writes per replaced session", MaxWritesPerSession), fmt.Sprintf("%.2f", writes),
			writes <= MaxWritesPerSession},
		{fmt.Sprintf("controller peak RSS ≤ %s (30 MiB × max(N,1000)/1000)", mib(RSSBudget(r.Sessions))), mib(r.PeakRSS),
			r.PeakRSS <= RSSBudget(r.Sessions)},
		{"controller idle requests 0 /min/session (watch renewals apart)", fmt.Sprintf("%.3f", r.IdlePerMinute(own)),
			sum(own) == 0},
	}
	if r.IdleRuntimes != nil {
		t = append(t, Target{"runtime idle requests 0 /min/session", fmt.Sprintf("%.3f", r.IdlePerMinute(r.IdleRuntimes)),
			sum(r.IdleRuntimes) == 0})
	}
	return append(t,
		Target{"every session replaced", fmt.Sprintf("%d/%d", r.Replaced, r.Sessions), r.Replaced >= r.Sessions},
		Target{"no protocol violation", fmt.Sprintf("%d", len(r.Violations)), len(r.Violations) == 0},
	)
}

// Print writes the figures, the phases and the targets; ok is false when a
// target is missed.
func (r Result) Print(w io.Writer) (ok bool) {
	n := float64(max(r.Replaced, 1))
	writes, events := r.writesPerSession()
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	fmt.Fprintf(w, "\nrollout of %d sessions (Drain, maxUnavailable %s, idle runtimes, %s mode)\n", r.Sessions, r.MaxUnavailable.String(), r.Runtimes)
	fmt.Fprintf(w, "  pods replaced:                   %d\n", r.Replaced)
	fmt.Fprintf(w, "  time to converge:                %s\n", r.Converge.Round(100*time.Millisecond))
	fmt.Fprintf(w, "  raw rollout (floor):             %s  (%d plain StatefulSets: image patched, stale pods deleted with grace 0, %d workers)\n",
		r.Raw.Rollout.Round(100*time.Millisecond), r.Raw.Sets, rawWorkers)
	fmt.Fprintf(w, "  converge ÷ raw rollout:          %.2f\n", r.RolloutRatio())
	fmt.Fprintf(w, "  protocol floor:                  %s, reported %s  (%d sessions: drain request, Drained report, delete, recreation, new report, by a plain client, %d workers a step)\n",
		r.Protocol.Rollout.Round(100*time.Millisecond), r.Protocol.Reported.Round(100*time.Millisecond), r.Protocol.Sessions, rawWorkers)
	fmt.Fprintf(w, "  converge ÷ protocol floor:       %.2f\n", r.ProtocolRatio())
	fmt.Fprintf(w, "  Drained report → delete:         p50 %s, p99 %s, max %s (n=%d)\n", ms(Percentile(r.ReportToDelete, 50)),
		ms(Percentile(r.ReportToDelete, 99)), ms(Percentile(r.ReportToDelete, 100)), len(r.ReportToDelete))
	fmt.Fprintf(w, "  API server write→watch (floor):  p50 %s, p99 %s, max %s (n=%d sequential writes of one object)\n",
		ms(Percentile(r.WatchFloor, 50)), ms(Percentile(r.WatchFloor, 99)), ms(Percentile(r.WatchFloor, 100)), len(r.WatchFloor))
	fmt.Fprintf(w, "  report→delete p99 ÷ write→watch p99: %.1f  (the issue asks ≤ 3 for a single session's drain; here %d drain together)\n",
		r.ReportToDeleteRatio(), r.Sessions)
	fmt.Fprintf(w, "  controller writes / session:     %.2f (plus %.2f Events)\n", writes, events)
	for _, k := range sortedKeys(r.Writes) {
		fmt.Fprintf(w, "      %-36s %6.0f  (%.2f / session)\n", k, r.Writes[k], r.Writes[k]/n)
	}
	fmt.Fprintf(w, "  session status writes by reason: %s\n", byKey(r.StatusWrites))
	fmt.Fprintf(w, "  controller work queue depth, max (sampled every 500ms): %s\n", byKey(r.QueueDepth))
	fmt.Fprintf(w, "  controller reconcile time p99 (bucket bound): %s\n", quantiles(r.ReconcileTime, 0.99))
	fmt.Fprintf(w, "  controller queue wait p99 (bucket bound):     %s\n", quantiles(r.QueueWait, 0.99))
	fmt.Fprintf(w, "  controller peak RSS:             %s\n", mib(r.PeakRSS))
	fmt.Fprintf(w, "  controller CPU during rollout:   %s\n", r.CPU)
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  VIOLATION: %s\n", v)
	}
	fmt.Fprintf(w, "idle, current sessions over %s after converge\n", r.IdleWindow)
	own, watches := splitWatches(r.IdleController)
	fmt.Fprintf(w, "  controller: %.0f requests, %.3f /min/session: %s\n", sum(own), r.IdlePerMinute(own), byKey(own))
	fmt.Fprintf(w, "              and %.0f watch renewals of its informers (one per watched kind every 5–10 min, whatever the sessions): %s\n",
		sum(watches), byKey(watches))
	if r.IdleRuntimes != nil {
		fmt.Fprintf(w, "  runtimes:   %.0f requests, %.3f /min/session: %s\n", sum(r.IdleRuntimes), r.IdlePerMinute(r.IdleRuntimes), byKey(r.IdleRuntimes))
	} else {
		fmt.Fprintf(w, "  runtimes:   not counted (%s mode: their requests leave this process)\n", r.Runtimes)
	}
	fmt.Fprintf(w, "phases: %s\n", phases(r))
	ok = true
	fmt.Fprintf(w, "targets\n")
	for _, t := range r.Targets() {
		mark := "met"
		if !t.Met {
			mark, ok = "MISSED", false
		}
		fmt.Fprintf(w, "  %-58s %10s  %s\n", t.Name, t.Figure, mark)
	}
	return ok
}

func phases(r Result) string {
	parts := make([]string, 0, len(r.Phases)+1)
	var total time.Duration
	for _, p := range r.Phases {
		s := fmt.Sprintf("%s %s", p.Name, p.Took.Round(100*time.Millisecond))
		if p.Name == "raw rollout floor" {
			s += fmt.Sprintf(" (setup %s, rollout %s, teardown %s)", r.Raw.Setup.Round(100*time.Millisecond),
				r.Raw.Rollout.Round(100*time.Millisecond), r.Raw.Teardown.Round(100*time.Millisecond))
		}
		if p.Name == "protocol floor" {
			s += fmt.Sprintf(" (setup %s, rollout %s, reported %s, teardown %s)", r.Protocol.Setup.Round(100*time.Millisecond),
				r.Protocol.Rollout.Round(100*time.Millisecond), r.Protocol.Reported.Round(100*time.Millisecond), r.Protocol.Teardown.Round(100*time.Millisecond))
		}
		parts = append(parts, s)
		total += p.Took
	}
	return strings.Join(append(parts, "total "+total.Round(time.Second).String()), ", ")
}

// quantiles formats each histogram's q-quantile bound, by key.
func quantiles(hs map[string]Histogram, q float64) string {
	if len(hs) == 0 {
		return "none observed"
	}
	keys := make([]string, 0, len(hs))
	for k := range hs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		b, _ := hs[k].Quantile(q)
		bound := "> last bucket"
		if !math.IsInf(b, 1) {
			bound = "≤ " + time.Duration(b*float64(time.Second)).String()
		}
		parts[i] = fmt.Sprintf("%s %s (n=%.0f)", k, bound, hs[k].Count())
	}
	return strings.Join(parts, ", ")
}

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func sum(m map[string]float64) float64 {
	t := 0.0
	for _, v := range m {
		t += v
	}
	return t
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func byKey(m map[string]float64) string {
	if len(m) == 0 {
		return "none"
	}
	keys := sortedKeys(m)
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
