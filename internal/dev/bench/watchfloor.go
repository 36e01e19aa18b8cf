package bench

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// watchFloorObject names the ConfigMap the write→watch floor is measured
// on.
const watchFloorObject = "bench-watch-floor"

// watchFloor measures the API server's own write→watch delivery: n
// sequential patches of one ConfigMap in ns, each timed from just before
// the request to the moment a watch on that ConfigMap (field selector on
// its name, as a runtime watches its Session) delivers the patch's
// resourceVersion. It returns the latencies, sorted, and deletes the
// ConfigMap. Each write waits for the previous one's event, so the
// figures are of one object's write at a time: a single session's floor.
func watchFloor(ctx context.Context, cs kubernetes.Interface, ns string, n int) ([]time.Duration, error) {
	cms := cs.CoreV1().ConfigMaps(ns)
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: watchFloorObject}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("write→watch floor: %w", err)
	}
	defer func() { _ = cms.Delete(context.WithoutCancel(ctx), watchFloorObject, metav1.DeleteOptions{}) }()
	w, err := cms.Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", watchFloorObject).String(),
		ResourceVersion: cm.ResourceVersion,
	})
	if err != nil {
		return nil, fmt.Errorf("write→watch floor: %w", err)
	}
	defer w.Stop()
	lat := make([]time.Duration, 0, n)
	for i := range n {
		patch := fmt.Appendf(nil, `{"data":{"write":%q}}`, strconv.Itoa(i))
		start := time.Now()
		got, err := cms.Patch(ctx, watchFloorObject, types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			return nil, fmt.Errorf("write→watch floor, write %d: %w", i, err)
		}
		seen, err := awaitVersion(ctx, w, got.ResourceVersion, 10*time.Second)
		if err != nil {
			return nil, fmt.Errorf("write→watch floor, write %d: %w", i, err)
		}
		lat = append(lat, seen.Sub(start))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat, nil
}

// awaitVersion reads w until it delivers an object at resourceVersion rv
// and returns when that was.
func awaitVersion(ctx context.Context, w watch.Interface, rv string, timeout time.Duration) (time.Time, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return time.Time{}, fmt.Errorf("watch closed before resourceVersion %s", rv)
			}
			if m, ok := ev.Object.(metav1.Object); ok && m.GetResourceVersion() == rv {
				return time.Now(), nil
			}
		case <-deadline.C:
			return time.Time{}, fmt.Errorf("resourceVersion %s not delivered within %s", rv, timeout)
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}
