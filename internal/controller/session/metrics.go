package session

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

var (
	// statusWrites counts status patches by the rollout reason that caused
	// them, so the cost of each step of a rollout can be read off /metrics.
	statusWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lull_session_status_writes_total",
		Help: "Session status patches the controller sent, by the rollout reason that caused them.",
	}, []string{"reason"})

	// expiredTurns counts the turn leases runtimes reported expired.
	expiredTurns = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lull_runtime_expired_turns_total",
		Help: "Turns whose lease expired before they ended, as runtimes reported them (status.runtime.expiredTurns increases seen by the controller). An expiry is not a finished turn: its client may have missed a renewal.",
	})

	// actions counts rollout steps carried out, by kind and reason.
	actions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lull_session_rollout_actions_total",
		Help: "Rollout steps the controller carried out (RequestDrain, DeletePod), by reason.",
	}, []string{"kind", "reason"})

	// orphansReaped counts the objects the reaper deleted, by kind.
	orphansReaped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lull_orphans_reaped_total",
		Help: "Objects lull made for a session that no longer exists (or was recreated under its name) deleted by the reaper, by kind.",
	}, []string{"kind"})

	// culls counts idle culls and lifetime restarts, by reason.
	culls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lull_session_culls_total",
		Help: "Idle culls completed (reason Suspend or Delete) and lifetime restarts begun (reason Lifetime).",
	}, []string{"reason"})

	// forcedReplacements counts pods deleted without a Drained report from
	// their runtime, by the reason the controller gave.
	forcedReplacements = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lull_session_forced_replacements_total",
		Help: "Pods the controller deleted without a Drained report from their runtime, by reason: Forced (the lull.dev/force-update annotation), Replaced (strategy Replace), DrainDeadlineExceeded (onDrainTimeout Replace or a break-glass), PodFailed and NeverStarted (a stale pod that could not serve).",
	}, []string{"reason"})

	// requestToDrained is how long runtimes took to drain: from the drain
	// request to the Drained report that answered it.
	requestToDrained = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "lull_drain_request_to_drained_seconds",
		Help: "Seconds from a drain request (status.drain.requestedAt) to the runtime's Drained report that answered it, observed once per drain when the controller commits the replacement, by namespace, template and drain reason. Timestamps are stored to the second.",
		// Turns last seconds to tens of minutes; a drain waits for the
		// longest one in flight.
		Buckets: []float64{1, 2, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200},
	}, []string{"namespace", "template", "reason"})

	// drainedToDelete is how long the controller took to act on a Drained
	// report: from the report to the API server accepting the pod's delete.
	drainedToDelete = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "lull_drain_drained_to_delete_seconds",
		Help: "Seconds from a runtime's Drained report (when the API server stored it) to the controller's accepted delete of its pod, observed once per drained pod, by namespace and template. The report time is stored to the second, so a sample reads up to 1 s long.",
		// The controller's own latency: sub-second when it keeps up, tens
		// of seconds when its queue is deep.
		Buckets: []float64{0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300},
	}, []string{"namespace", "template"})
)

// ForgetTemplateMetrics deletes the series of the drain histograms
// (lull_drain_request_to_drained_seconds, lull_drain_drained_to_delete_seconds)
// of the template namespace/name, which is gone: each template's series
// would otherwise stay in memory, and exported, for the life of the process.
func ForgetTemplateMetrics(namespace, name string) {
	l := prometheus.Labels{"namespace": namespace, "template": name}
	requestToDrained.DeletePartialMatch(l)
	drainedToDelete.DeletePartialMatch(l)
}

func init() {
	metrics.Registry.MustRegister(statusWrites, actions, expiredTurns, culls, forcedReplacements, orphansReaped, requestToDrained, drainedToDelete)
	// Every reason is exported from the start, at 0: a counter that first
	// appears at 1 hides that first cull or forced replacement from
	// increase() and rate().
	for _, reason := range []string{string(lullv1.IdleSuspend), string(lullv1.IdleDelete), string(lullv1.DrainReasonLifetime)} {
		culls.WithLabelValues(reason)
	}
	for _, reason := range ForcedReplacementReasons {
		forcedReplacements.WithLabelValues(reason)
	}
}

// ForcedReplacementReasons are the values of the reason label of
// lull_session_forced_replacements_total: the reasons the controller
// deletes a stale pod for without its runtime's Drained report.
var ForcedReplacementReasons = []string{
	lullv1.ReasonForced,
	lullv1.ReasonReplaced,
	lullv1.ReasonDrainDeadlineExceeded,
	string(lullv1.ReplacementPodFailed),
	string(lullv1.ReplacementNeverStarted),
}
