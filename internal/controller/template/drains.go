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
//
// What it holds is pruned with the objects it is about: a template's
// entry goes when the template does (forget) and starts over when a
// template of another UID takes its name; a session's start goes as soon
// as the session is no longer among its template's sessions (deleted
// mid-drain, say), and starts are keyed by session UID, so a session that
// takes a deleted one's name never inherits its start.
type drainClock struct {
	mu        sync.Mutex
	templates map[types.NamespacedName]*templateDrains
}

// templateDrains is what drainClock holds of one template.
type templateDrains struct {
	uid types.UID
	// started holds, by session UID, when the session's update drain
	// was requested.
	started  map[types.UID]time.Time
	mean     time.Duration
	measured bool
}

// observe records the sessions of the template tmpl (UID uid) as seen now:
// every session of the template, so one it no longer shows is gone.
func (d *drainClock) observe(tmpl types.NamespacedName, uid types.UID, sessions []lullv1.Session, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.templates == nil {
		d.templates = map[types.NamespacedName]*templateDrains{}
	}
	td := d.templates[tmpl]
	if td == nil || td.uid != uid {
		td = &templateDrains{uid: uid, started: map[types.UID]time.Time{}}
		d.templates[tmpl] = td
	}
	present := make(map[types.UID]bool, len(sessions))
	for i := range sessions {
		s := &sessions[i]
		present[s.UID] = true
		if r := s.Status.Drain; r != nil && r.Reason == lullv1.DrainReasonUpdate {
			if _, ok := td.started[s.UID]; !ok {
				td.started[s.UID] = r.RequestedAt.Time
			}
			continue
		}
		began, ok := td.started[s.UID]
		if !ok || !meta.IsStatusConditionTrue(s.Status.Conditions, lullv1.ConditionUpToDate) {
			continue
		}
		delete(td.started, s.UID)
		sample := now.Sub(began)
		if td.measured {
			td.mean += (sample - td.mean) / 5 // a moving mean over the last few moves
		} else {
			td.mean, td.measured = sample, true
		}
	}
	for s := range td.started {
		if !present[s] {
			delete(td.started, s)
		}
	}
}

// meanOf returns the template's mean move time, if any was measured.
func (d *drainClock) meanOf(tmpl types.NamespacedName) (time.Duration, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	td := d.templates[tmpl]
	if td == nil {
		return 0, false
	}
	return td.mean, td.measured
}

// forget drops what is held of the template tmpl, gone.
func (d *drainClock) forget(tmpl types.NamespacedName) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.templates, tmpl)
}
