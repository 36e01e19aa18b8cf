package session

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	lullv1 "lull.dev/lull/api/v1alpha1"
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
	case "TurnsInFlight":
		return "Active"
	case "Idle":
		return "Idle"
	case lullv1.ReasonRuntimeNotReporting:
		return "NotReporting"
	}
	return "Unknown"
}

var sessionsDesc = prometheus.NewDesc("lull_sessions", "Sessions by namespace and lifecycle state (Suspended, Draining, Active, Idle, NotReporting, Unknown), as the controller's cache holds them.", []string{"namespace", "state"}, nil)

// stateCollector counts the cached sessions by lifecycle state at each
// scrape, so the gauge never drifts from what the cache holds.
type stateCollector struct {
	mu     sync.Mutex
	reader client.Reader
}

var sessionStates = &stateCollector{}

func init() { metrics.Registry.MustRegister(sessionStates) }

// use makes the collector count from reader (the manager's cache).
func (c *stateCollector) use(reader client.Reader) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reader = reader
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- sessionsDesc }

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	reader := c.reader
	c.mu.Unlock()
	if reader == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var list lullv1.SessionList
	// Only counted: no deep copies of every session on each scrape.
	if err := reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return
	}
	type key struct{ ns, state string }
	counts := map[key]int{}
	for i := range list.Items {
		counts[key{list.Items[i].Namespace, LifecycleState(&list.Items[i])}]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(sessionsDesc, prometheus.GaugeValue, float64(n), k.ns, k.state)
	}
}
