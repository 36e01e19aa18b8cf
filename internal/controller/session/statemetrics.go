// The gauges of the fleet: lull_sessions, lull_drains_in_progress,
// lull_node_drains_in_progress and the rollout progress of each template, counted from the manager's cache at
// each scrape rather than kept up to date on every reconcile: a scrape
// walks the cached sessions once, a reconcile pays nothing, and the gauges
// never drift from what the cache holds.

package session

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/render"
	"lull.dev/lull/internal/rollout"
)

// LifecycleState is the one-word lifecycle state of a session for the
// lull_sessions metric: Suspended, Draining, Active, Idle, NotReporting or
// Unknown (no report from the current pod yet).
func LifecycleState(s *lullv1.Session) string {
	switch {
	case s.Status.Phase == lullv1.SessionSuspended:
		return "Suspended"
	case s.Status.Drain != nil:
		return "Draining"
	}
	switch conditionReason(s.Status.Conditions, lullv1.ConditionActive) {
	case lullv1.ReasonTurnsInFlight:
		return "Active"
	case lullv1.ReasonIdle:
		return "Idle"
	case lullv1.ReasonRuntimeNotReporting:
		return "NotReporting"
	}
	return "Unknown"
}

// The help texts of the fleet gauges.
const (
	sessionsHelp   = "Sessions by namespace, template, template revision their pod runs (status.templateRevision; empty while they have no pod), phase (status.phase; Unknown before the controller first wrote it) and lifecycle state (Suspended, Draining, Active, Idle, NotReporting, Unknown)."
	drainsHelp     = "Sessions with a drain request outstanding (status.drain), by namespace, template and drain reason (Update, Idle, Lifetime, Manual, NodeDrain); 0 for each reason of each cached template."
	nodeDrainsHelp = "Sessions with a drain request outstanding because their pod's node is being drained (status.drain.node: a NodeDrain request, or a request of another reason the node drain reuses), by node; a node appears while at least one of its sessions drains."
	currentHelp    = "Sessions of a template that run its current revision and are up to date (SessionTemplate status.current), by namespace and template."
	staleHelp      = "Sessions of a template, not suspended, that do not yet run its current revision (SessionTemplate status.stale), by namespace and template."
)

var (
	sessionsDesc   = prometheus.NewDesc("lull_sessions", sessionsHelp, []string{"namespace", "template", "revision", "phase", "state"}, nil)
	drainsDesc     = prometheus.NewDesc("lull_drains_in_progress", drainsHelp, []string{"namespace", "template", "reason"}, nil)
	currentDesc    = prometheus.NewDesc("lull_template_sessions_current", currentHelp, []string{"namespace", "template"}, nil)
	staleDesc      = prometheus.NewDesc("lull_template_sessions_stale", staleHelp, []string{"namespace", "template"}, nil)
	nodeDrainsDesc = prometheus.NewDesc("lull_node_drains_in_progress", nodeDrainsHelp, []string{"node"}, nil)
)

// drainReasons are the values of lull_drains_in_progress's reason label.
var drainReasons = []lullv1.DrainReason{lullv1.DrainReasonUpdate, lullv1.DrainReasonIdle, lullv1.DrainReasonLifetime, lullv1.DrainReasonManual, lullv1.DrainReasonNodeDrain}

// templateKey names a template: namespace and name.
type templateKey struct{ namespace, template string }

// sessionKey is one series of lull_sessions.
type sessionKey struct {
	templateKey
	revision, phase, state string
}

// drainKey is one series of lull_drains_in_progress.
type drainKey struct {
	templateKey
	reason lullv1.DrainReason
}

// progress is a template's rollout progress.
type progress struct{ current, stale int }

// FleetCounts is what the fleet gauges export, counted from one list of
// templates and one of sessions.
type FleetCounts struct {
	Sessions map[sessionKey]int
	Drains   map[drainKey]int
	Progress map[templateKey]progress
	// NodeDrains counts the sessions draining for each node being
	// drained (status.drain.node).
	NodeDrains map[string]int
}

// CountFleet counts sessions for the fleet gauges. Every template listed
// gets its drain and progress series, at 0 when nothing counts, so a
// dashboard shows 0 rather than no data. A session whose template is not
// listed (deleted, or not cached yet) counts in lull_sessions and
// lull_drains_in_progress only: it has no current revision to be judged by.
func CountFleet(templates []lullv1.SessionTemplate, sessions []lullv1.Session) FleetCounts {
	fc := FleetCounts{Sessions: map[sessionKey]int{}, Drains: map[drainKey]int{}, Progress: map[templateKey]progress{}, NodeDrains: map[string]int{}}
	revisions := make(map[templateKey]string, len(templates))
	for i := range templates {
		t := &templates[i]
		k := templateKey{t.Namespace, t.Name}
		revisions[k] = render.TemplateRevision(t)
		fc.Progress[k] = progress{}
		for _, reason := range drainReasons {
			fc.Drains[drainKey{k, reason}] = 0
		}
	}
	for i := range sessions {
		s := &sessions[i]
		k := templateKey{s.Namespace, s.Spec.TemplateRef.Name}
		phase := string(s.Status.Phase)
		if phase == "" {
			phase = "Unknown"
		}
		fc.Sessions[sessionKey{k, s.Status.TemplateRevision, phase, LifecycleState(s)}]++
		if d := s.Status.Drain; d != nil {
			fc.Drains[drainKey{k, d.Reason}]++
			if d.Node != "" {
				fc.NodeDrains[d.Node]++
			}
		}
		revision, ok := revisions[k]
		if !ok || s.Spec.Suspend { // as Summarize: a suspended session is neither
			continue
		}
		p := fc.Progress[k]
		if rollout.Current(s, revision) {
			p.current++
		} else {
			p.stale++
		}
		fc.Progress[k] = p
	}
	return fc
}

// fleetCollector exports CountFleet of the cached templates and sessions at
// each scrape, on the leader only.
type fleetCollector struct {
	mu      sync.Mutex
	reader  client.Reader
	elected <-chan struct{}
}

var fleet = &fleetCollector{}

func init() { metrics.Registry.MustRegister(fleet) }

// use makes the collector count from reader (the manager's cache) once
// elected is closed (the manager's Elected). Every replica fills its cache,
// leader or not: were each to export the fleet, a sum over the replicas'
// scrapes would count every session once per replica.
func (c *fleetCollector) use(reader client.Reader, elected <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reader, c.elected = reader, elected
}

func (c *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sessionsDesc
	ch <- drainsDesc
	ch <- currentDesc
	ch <- staleDesc
	ch <- nodeDrainsDesc
}

func (c *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	reader, elected := c.reader, c.elected
	c.mu.Unlock()
	if reader == nil {
		return
	}
	select {
	case <-elected:
	default:
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var templates lullv1.SessionTemplateList
	var sessions lullv1.SessionList
	// Only counted: no deep copies of every session on each scrape. A
	// failed list leaves these gauges out of this scrape; an invalid
	// metric would fail the whole scrape (the server answers 500 on any
	// error), every other metric with it.
	if err := reader.List(ctx, &templates, client.UnsafeDisableDeepCopy); err != nil {
		return
	}
	if err := reader.List(ctx, &sessions, client.UnsafeDisableDeepCopy); err != nil {
		return
	}
	fc := CountFleet(templates.Items, sessions.Items)
	for k, n := range fc.Sessions {
		ch <- prometheus.MustNewConstMetric(sessionsDesc, prometheus.GaugeValue, float64(n), k.namespace, k.template, k.revision, k.phase, k.state)
	}
	for k, n := range fc.Drains {
		ch <- prometheus.MustNewConstMetric(drainsDesc, prometheus.GaugeValue, float64(n), k.namespace, k.template, string(k.reason))
	}
	for k, p := range fc.Progress {
		ch <- prometheus.MustNewConstMetric(currentDesc, prometheus.GaugeValue, float64(p.current), k.namespace, k.template)
		ch <- prometheus.MustNewConstMetric(staleDesc, prometheus.GaugeValue, float64(p.stale), k.namespace, k.template)
	}
	for node, n := range fc.NodeDrains {
		ch <- prometheus.MustNewConstMetric(nodeDrainsDesc, prometheus.GaugeValue, float64(n), node)
	}
}
