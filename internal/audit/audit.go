// Package audit is an independent check of a rollout. It watches pod
// deletions and session reports through its own informers, reads the
// runtimes' turn journals, and reports every deletion that broke the drain
// protocol:
//
//   - a pod deleted while a journaled turn on it was still open;
//   - a healthy pod deleted without a prior Drained report whose request ID
//     and pod UID match the session's drain request (failed pods and forced
//     replacements aside).
//
// It trusts neither the controller nor the runtime: the journal is written
// by the runtime process around its work, the deletions and reports come
// from the API server.
package audit

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
	"lull.dev/lull/internal/journal"
	"lull.dev/lull/internal/manager"
	"lull.dev/lull/internal/rollout"
)

// Deletion is what the auditor saw when a session pod was deleted.
type Deletion struct {
	Namespace, Session, Pod string
	PodUID                  types.UID
	// At is when the auditor first saw the deletion (deletionTimestamp set
	// or the pod gone).
	At time.Time
	// Failed: the pod was terminal or could not start.
	Failed bool
	// Forced: the session carried lull.dev/force-update.
	Forced bool
	// Drained: a Drained report matching the session's drain request and
	// this pod's UID was seen before the deletion.
	Drained bool
	// DrainedAt is when that report was first seen.
	DrainedAt time.Time

	rv uint64 // resourceVersion of the first write that showed the deletion
}

// Auditor records deletions and reports while it runs.
type Auditor struct {
	cache ctrlcache.Cache

	mu        sync.Mutex
	pods      map[types.UID]*corev1.Pod
	sessions  map[types.NamespacedName]*lullv1.Session
	drainedAt map[types.UID]time.Time // first matching Drained report per pod
	drainedRV map[types.UID]uint64    // resourceVersion of that report
	deletions map[types.UID]*Deletion
	exempt    map[types.UID]string
}

// Start begins watching pods and sessions; it returns once the caches have
// synced. The auditor runs until ctx is done.
func Start(ctx context.Context, cfg *rest.Config) (*Auditor, error) {
	c, err := ctrlcache.New(cfg, ctrlcache.Options{Scheme: manager.Scheme()})
	if err != nil {
		return nil, err
	}
	a := &Auditor{cache: c, pods: map[types.UID]*corev1.Pod{}, sessions: map[types.NamespacedName]*lullv1.Session{},
		drainedAt: map[types.UID]time.Time{}, drainedRV: map[types.UID]uint64{}, deletions: map[types.UID]*Deletion{}, exempt: map[types.UID]string{}}
	podInf, err := c.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return nil, err
	}
	sessInf, err := c.GetInformer(ctx, &lullv1.Session{})
	if err != nil {
		return nil, err
	}
	if _, err := sessInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { a.session(o) },
		UpdateFunc: func(_, o any) { a.session(o) },
	}); err != nil {
		return nil, err
	}
	if _, err := podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { a.pod(o, false) },
		UpdateFunc: func(_, o any) { a.pod(o, false) },
		DeleteFunc: func(o any) { a.pod(o, true) },
	}); err != nil {
		return nil, err
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("audit: caches did not sync")
	}
	return a, nil
}

func (a *Auditor) session(o any) {
	s, ok := o.(*lullv1.Session)
	if !ok {
		return
	}
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sessions[types.NamespacedName{Namespace: s.Namespace, Name: s.Name}] = s.DeepCopy()
	r := s.Status.Runtime
	if r != nil && r.State == lullv1.RuntimeServing && a.deletions[r.PodUID] == nil {
		// The runtime reopened: an earlier Drained report no longer holds.
		delete(a.drainedAt, r.PodUID)
		delete(a.drainedRV, r.PodUID)
	}
	if r != nil && drain.Answers(s.Status.Drain, r, r.PodUID) {
		if _, seen := a.drainedAt[r.PodUID]; !seen {
			a.drainedAt[r.PodUID] = now
			a.drainedRV[r.PodUID] = rv(s)
		}
	}
}

func (a *Auditor) pod(o any, gone bool) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o, gone = t.Obj, true
	}
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	name := pod.Labels[lullv1.LabelSession]
	if name == "" {
		return
	}
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	prev := a.pods[pod.UID]
	a.pods[pod.UID] = pod.DeepCopy()
	if (!gone && pod.DeletionTimestamp == nil) || a.deletions[pod.UID] != nil {
		return
	}
	// Judge the pod as it was just before the deletion.
	judged := pod
	if prev != nil {
		judged = prev
	}
	failed, _ := rollout.PodFailure(judged)
	d := &Deletion{Namespace: pod.Namespace, Session: name, Pod: pod.Name, PodUID: pod.UID, At: now, Failed: failed}
	if s := a.sessions[types.NamespacedName{Namespace: pod.Namespace, Name: name}]; s != nil {
		d.Forced = s.Annotations[lullv1.AnnotationForceUpdate] != ""
	}
	d.rv = rv(pod)
	a.deletions[pod.UID] = d
}

// rv returns an object's resourceVersion as a number. The API server's etcd
// store uses etcd's global revision, so versions of different objects order
// their writes; the auditor relies on this to tell whether a Drained report
// was written before a deletion, whatever order two watches deliver them in.
func rv(o metav1.Object) uint64 {
	n, _ := strconv.ParseUint(o.GetResourceVersion(), 10, 64)
	return n
}

// Exempt marks a pod whose deletion is not the controller's doing (a test
// deleting it as "someone else"), so its deletion is not judged.
func (a *Auditor) Exempt(uid types.UID, why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.exempt[uid] = why
}

// Deletions returns every session pod deletion seen so far, oldest first.
func (a *Auditor) Deletions() []Deletion {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Deletion, 0, len(a.deletions))
	for uid, d := range a.deletions {
		dd := *d
		if at, ok := a.drainedAt[uid]; ok && a.drainedRV[uid] < d.rv {
			dd.Drained, dd.DrainedAt = true, at
		}
		out = append(out, dd)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// Report is the auditor's verdict over a run.
type Report struct {
	Deletions   []Deletion
	Completed   int // turns journaled as begun and ended
	Interrupted []journal.Turn
	InFlight    int // turns still open on pods that were not deleted
	Refused     int // turns refused while draining (clients retry)
	Violations  []string
}

// Check reads the journals in journalDir and judges every deletion seen in
// namespace ns (all namespaces when ns is empty). Under a Drain policy, any
// violation fails the run.
func (a *Auditor) Check(journalDir, ns string) (Report, error) {
	entries, err := journal.ReadDir(journalDir)
	if err != nil {
		return Report{}, err
	}
	if ns != "" {
		kept := entries[:0]
		for _, e := range entries {
			if e.Namespace == ns {
				kept = append(kept, e)
			}
		}
		entries = kept
	}
	turns, refused := journal.Turns(entries)
	r := Report{Refused: refused}
	a.mu.Lock()
	exempt := maps.Clone(a.exempt)
	a.mu.Unlock()
	deleted := map[types.UID]Deletion{}
	for _, d := range a.Deletions() {
		if ns != "" && d.Namespace != ns {
			continue
		}
		r.Deletions = append(r.Deletions, d)
		deleted[d.PodUID] = d
		if _, ok := exempt[d.PodUID]; ok {
			d.Forced = true // judged like a forced replacement
			deleted[d.PodUID] = d
			continue
		}
		if !d.Drained && !d.Failed && !d.Forced {
			r.Violations = append(r.Violations, fmt.Sprintf("pod %s/%s (%s) was deleted at %s without a matching Drained report (healthy, not forced)", d.Namespace, d.Pod, d.PodUID, d.At.Format(time.RFC3339Nano)))
		}
	}
	for _, t := range turns {
		d, wasDeleted := deleted[t.PodUID]
		if wasDeleted && d.Drained && t.Began.After(d.DrainedAt) {
			r.Violations = append(r.Violations, fmt.Sprintf("turn %d of session %s/%s began on pod %s at %s, after the runtime reported Drained at %s",
				t.Turn, t.Namespace, t.Session, t.PodUID, t.Began.Format(time.RFC3339Nano), d.DrainedAt.Format(time.RFC3339Nano)))
		}
		switch {
		case !t.Ended.IsZero() && (!wasDeleted || t.Ended.Before(d.At)):
			r.Completed++
		case !wasDeleted:
			r.InFlight++
		default:
			r.Interrupted = append(r.Interrupted, t)
			if !d.Failed && !d.Forced {
				r.Violations = append(r.Violations, fmt.Sprintf("turn %d of session %s/%s on pod %s began %s and was open when the pod was deleted at %s",
					t.Turn, t.Namespace, t.Session, t.PodUID, t.Began.Format(time.RFC3339Nano), d.At.Format(time.RFC3339Nano)))
			}
		}
	}
	return r, nil
}

// Client returns a reader over the auditor's caches.
func (a *Auditor) Client() client.Reader { return a.cache }
