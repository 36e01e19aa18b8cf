package template

import "k8s.io/apimachinery/pkg/types"

// heldWrites is how many templates the reconciler holds a last write of.
func heldWrites(r *Reconciler) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.lastWrite)
}

// heldDrainClock reports whether the drain clock holds anything of tmpl.
func heldDrainClock(r *Reconciler, tmpl types.NamespacedName) bool {
	r.drains.mu.Lock()
	defer r.drains.mu.Unlock()
	return r.drains.templates[tmpl] != nil
}

// heldDrainStarts is how many sessions' drain starts the clock holds for
// tmpl.
func heldDrainStarts(r *Reconciler, tmpl types.NamespacedName) int {
	r.drains.mu.Lock()
	defer r.drains.mu.Unlock()
	if td := r.drains.templates[tmpl]; td != nil {
		return len(td.started)
	}
	return 0
}
