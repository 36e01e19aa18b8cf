package template

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// drainClock measures how long moves take: from the drain request of a
// session seen draining for an update to the same session seen up to date.
// It keeps a moving mean per template, in memory: a restarted controller
// starts measuring again (and estimates nothing until a drain finishes).
type drainClock struct {
	mu      sync.Mutex
	started map[types.NamespacedName]time.Time
	mean    map[types.NamespacedName]time.Duration
}

// observe records the template's sessions as seen now.
func (d *drainClock) observe(tmpl types.NamespacedName, sessions []lullv1.Session, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started == nil {
		d.started, d.mean = map[types.NamespacedName]time.Time{}, map[types.NamespacedName]time.Duration{}
	}
	for i := range sessions {
		s := &sessions[i]
		key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
		if r := s.Status.Drain; r != nil && r.Reason == lullv1.DrainReasonUpdate {
			if _, ok := d.started[key]; !ok {
				d.started[key] = r.RequestedAt.Time
			}
			continue
		}
		began, ok := d.started[key]
		if !ok || !meta.IsStatusConditionTrue(s.Status.Conditions, lullv1.ConditionUpToDate) {
			continue
		}
		delete(d.started, key)
		sample := now.Sub(began)
		if m, ok := d.mean[tmpl]; ok {
			d.mean[tmpl] = m + (sample-m)/5 // a moving mean over the last few moves
		} else {
			d.mean[tmpl] = sample
		}
	}
}

// meanOf returns the template's mean move time, if any was measured.
func (d *drainClock) meanOf(tmpl types.NamespacedName) (time.Duration, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m, ok := d.mean[tmpl]
	return m, ok
}
