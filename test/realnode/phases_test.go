package realnode

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// replacement is when each step of one session's replacement was first
// seen (polled every 100 ms, so each is late by up to that): its runtime
// reporting Draining (it refuses new turns from then on) and Drained, its
// old pod marked for deletion and gone, the new pod Running, and the new
// runtime reporting Serving.
type replacement struct {
	draining, drained, deleting, gone, running, serving time.Time
}

// watchReplacements polls the sessions and pods of ns until stop is
// called, and returns each session's replacement of the pod it had at
// the start (oldUIDs: session name → pod UID).
func watchReplacements(ctx context.Context, ns string, oldUIDs map[string]string) (stop func() map[string]*replacement) {
	out := map[string]*replacement{}
	for name := range oldUIDs {
		out[name] = &replacement{}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	first := func(t *time.Time, now time.Time, cond bool) {
		if cond && t.IsZero() {
			*t = now
		}
	}
	wg.Go(func() {
		for ctx.Err() == nil {
			var sessions lullv1.SessionList
			var pods corev1.PodList
			if c.List(ctx, &sessions, client.InNamespace(ns)) == nil && c.List(ctx, &pods, client.InNamespace(ns)) == nil {
				now := time.Now()
				for _, s := range sessions.Items {
					r, old := out[s.Name], oldUIDs[s.Name]
					if r == nil {
						continue
					}
					if rt := s.Status.Runtime; rt != nil {
						first(&r.draining, now, string(rt.PodUID) == old && rt.State == lullv1.RuntimeDraining)
						first(&r.drained, now, string(rt.PodUID) == old && rt.State == lullv1.RuntimeDrained)
						first(&r.draining, now, string(rt.PodUID) == old && rt.State == lullv1.RuntimeDrained)
						first(&r.serving, now, string(rt.PodUID) != old && rt.State == lullv1.RuntimeServing)
					}
					present := false
					for _, p := range pods.Items {
						if p.Name != s.Name+"-0" {
							continue
						}
						if string(p.UID) == old {
							present = true
							first(&r.deleting, now, p.DeletionTimestamp != nil)
						} else {
							first(&r.running, now, p.Status.Phase == corev1.PodRunning)
						}
					}
					first(&r.gone, now, !present)
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	return func() map[string]*replacement {
		cancel()
		wg.Wait()
		return out
	}
}

// logReplacements logs the median and the longest of each step over the
// sessions in which both of its ends were seen (a step shorter than the
// poll, such as a KWOK pod's removal, may be missed). The order of the
// steps is the auditor's to judge, from etcd: two polls cannot order a
// report and a deletion made between them.
func logReplacements(t *testing.T, rs map[string]*replacement) {
	t.Helper()
	steps := []struct {
		name     string
		from, to func(*replacement) time.Time
	}{
		{"Drained → pod deleted", func(r *replacement) time.Time { return r.drained }, func(r *replacement) time.Time { return r.deleting }},
		{"pod deleted → pod gone", func(r *replacement) time.Time { return r.deleting }, func(r *replacement) time.Time { return r.gone }},
		{"pod gone → new pod Running", func(r *replacement) time.Time { return r.gone }, func(r *replacement) time.Time { return r.running }},
		// The sidecar reports Serving as soon as it is up, often before
		// the kubelet has written the pod's phase: both from the old pod's
		// removal.
		{"pod gone → new runtime Serving", func(r *replacement) time.Time { return r.gone }, func(r *replacement) time.Time { return r.serving }},
		{"the user's gap: Draining (new turns refused) → new runtime Serving", func(r *replacement) time.Time { return r.draining }, func(r *replacement) time.Time { return r.serving }},
	}
	var lines []string
	for _, st := range steps {
		var ds []time.Duration
		for _, r := range rs {
			from, to := st.from(r), st.to(r)
			if from.IsZero() || to.IsZero() {
				continue
			}
			ds = append(ds, to.Sub(from))
		}
		if len(ds) == 0 {
			continue
		}
		slices.Sort(ds)
		lines = append(lines, fmt.Sprintf("  %-66s p50 %5.1fs  max %5.1fs  (%d of %d seen)", st.name, ds[len(ds)/2].Seconds(), ds[len(ds)-1].Seconds(), len(ds), len(rs)))
	}
	t.Logf("replacements of %d sessions:\n%s", len(rs), strings.Join(lines, "\n"))
}
