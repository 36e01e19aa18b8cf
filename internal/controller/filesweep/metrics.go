package filesweep

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// swept counts the files ConfigMaps the sweeper deleted.
	swept = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lull_files_configmaps_swept_total",
		Help: "Files ConfigMaps (spec.files) the sweeper deleted because nothing needed them.",
	})

	// conflicts counts deletes the API server refused because the
	// ConfigMap changed (resourceVersion precondition) or was gone.
	conflicts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lull_files_sweep_conflicts_total",
		Help: "Sweeper deletes refused because the ConfigMap changed since it was judged (a session marked it referenced) or was already gone; the ConfigMap is judged again at the next pass.",
	})

	// kept is the number of files ConfigMaps the last pass of each
	// namespace kept, summed over namespaces, by reason.
	kept = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "lull_files_configmaps_kept",
		Help: "Files ConfigMaps the sweeper kept at its last pass of each namespace, summed over namespaces, by reason (current, referenced, mounted, settling, notOurs).",
	}, []string{"reason"})
)

func init() {
	metrics.Registry.MustRegister(swept, conflicts, kept)
}

// keptCounts holds the last pass's counts of each namespace, so the gauge
// is their sum.
var keptCounts = struct {
	sync.Mutex
	byNamespace map[string]map[Reason]int
}{byNamespace: map[string]map[Reason]int{}}

// reportKept records the counts of a namespace's pass and sets the gauge.
// A namespace that keeps nothing (its last files ConfigMap gone, or the
// namespace itself) is dropped, not held at zero: the map holds only the
// namespaces with files ConfigMaps.
func reportKept(namespace string, counts map[Reason]int) {
	keptCounts.Lock()
	defer keptCounts.Unlock()
	keptCounts.byNamespace[namespace] = counts
	if total(counts) == 0 {
		delete(keptCounts.byNamespace, namespace)
	}
	for _, r := range Reasons {
		total := 0
		for _, c := range keptCounts.byNamespace {
			total += c[r]
		}
		kept.WithLabelValues(string(r)).Set(float64(total))
	}
}

func total(counts map[Reason]int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}
