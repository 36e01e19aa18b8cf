package fleet

import (
	"context"
	"fmt"
	goruntime "runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/scenario"
)

// fleetSize is how many runtimes BenchmarkFleetRuntimes starts.
const fleetSize = 200

// BenchmarkFleetRuntimes starts fleetSize idle sessions in fleet mode and,
// once every runtime reports Serving, reports what one runtime costs this
// process: live heap bytes, goroutine stack bytes and goroutines, as the growth from before the
// sessions existed divided by fleetSize. The growth includes the pod
// runner's own share per pod (its informer's copy of the pod), as the
// kubelet's would be. Run it alone:
//
//	flock /tmp/lull-cluster.lock go test -p 1 -count=1 -run '^$' -bench FleetRuntimes -benchtime 1x ./test/fleet/
func BenchmarkFleetRuntimes(b *testing.B) {
	ctx := context.Background()
	for i := range b.N {
		ns := fmt.Sprintf("fleet-bench-%d", i)
		heap0, stack0, goroutines0 := liveMemory()
		tmpl := scenario.Template(ns, "rt", "example.com/lull/turnrunner:v1", "--turn-min=0s", "--turn-max=0s", "--think-max=1h")
		start := time.Now()
		names, err := scenario.Launch(ctx, c, tmpl, "s", fleetSize)
		if err != nil {
			b.Fatal(err)
		}
		eventually(b, 5*time.Minute, "every runtime reports Serving", func() error { return allServing(ctx, ns, len(names)) })
		b.Logf("%d runtimes serving after %s", fleetSize, time.Since(start).Round(100*time.Millisecond))
		time.Sleep(2 * time.Second) // first reports written, watches settled
		heap1, stack1, goroutines1 := liveMemory()
		b.ReportMetric(float64(heap1-heap0)/fleetSize, "heap-bytes/runtime")
		b.ReportMetric(float64(stack1-stack0)/fleetSize, "stack-bytes/runtime")
		b.ReportMetric(float64(goroutines1-goroutines0)/fleetSize, "goroutines/runtime")
		var ns0 corev1.Namespace
		ns0.Name = ns
		if err := c.Delete(ctx, &ns0); err != nil {
			b.Fatal(err)
		}
	}
}

// liveMemory returns the bytes of live heap objects after a full
// collection, the bytes of goroutine stacks, and the goroutines.
func liveMemory() (heap, stack int64, goroutines int) {
	goruntime.GC()
	var m goruntime.MemStats
	goruntime.ReadMemStats(&m)
	return int64(m.HeapAlloc), int64(m.StackInuse), goruntime.NumGoroutine()
}

// allServing returns nil once n sessions in ns have a runtime report
// Serving from their current pod.
func allServing(ctx context.Context, ns string, n int) error {
	var sessions lullv1.SessionList
	if err := c.List(ctx, &sessions, client.InNamespace(ns)); err != nil {
		return err
	}
	serving := 0
	for _, s := range sessions.Items {
		if r := s.Status.Runtime; r != nil && r.State == lullv1.RuntimeServing && r.PodUID == s.Status.PodUID && r.PodUID != "" {
			serving++
		}
	}
	if serving < n {
		return fmt.Errorf("%d of %d serving", serving, n)
	}
	return nil
}
