package session

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
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
)

func init() {
	metrics.Registry.MustRegister(statusWrites, actions, expiredTurns, culls, orphansReaped)
}
