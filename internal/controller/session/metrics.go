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

	// actions counts rollout steps carried out, by kind and reason.
	actions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lull_session_rollout_actions_total",
		Help: "Rollout steps the controller carried out (RequestDrain, DeletePod), by reason.",
	}, []string{"kind", "reason"})
)

func init() {
	metrics.Registry.MustRegister(statusWrites, actions)
}
