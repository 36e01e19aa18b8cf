// Package audit is an independent check of a rollout. It watches pod
// deletions and session reports in the cluster's store, reads the
// runtimes' turn journals, and reports every deletion that broke the drain
// protocol:
//
//   - a pod deleted while a journaled turn on it was still open;
//   - a pod deleted without a prior Drained report whose request ID and pod
//     UID match the session's drain request, when its runtime had neither
//     failed nor never started, and the deletion was not forced;
//   - a drain request ID issued twice for one pod.
//
// It trusts neither the controller nor the runtime: the journal is written
// by the runtime process around its work, the deletions and reports are
// read from etcd, the store behind the API server, where every write is
// kept in order (store.go says why not through the API server's watch).
// It shares no decision code with the controller either: rules.go is its
// own reading of docs/protocol.md.
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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/journal"
)

// Deletion is what the auditor saw when a session pod was deleted (or
// scaled away), and what the rules made of it.
type Deletion struct {
	Namespace, Session, Pod string
	PodUID                  types.UID
	// At is when the auditor first saw the deletion (deletionTimestamp set
	// or the pod gone) in etcd.
	At time.Time
	// Failed: the pod was terminal or its runtime container could not start.
	Failed bool
	// FailedReason says how it had failed.
	FailedReason string
	// NeverStarted: the runtime container had never started and no runtime
	// report had named the pod.
	NeverStarted bool
	// Forced: the session carried lull.dev/force-update ("true", or the ID
	// of the request outstanding for the pod).
	Forced bool
	// DeadlinePassed: the drain request for the pod named a deadline, and
	// the deletion was seen after it.
	DeadlinePassed bool
	// Exempt is why the test exempted the pod; set by Check.
	Exempt string
	// Drained: a Drained report matching the session's drain request and
	// this pod's UID was seen before the deletion, and still held.
	Drained bool
	// DrainedAt is when that report was first seen.
	DrainedAt time.Time
	// RequestID is the drain request that report answered.
	RequestID string
	// Detail says what the auditor saw of the pod's runtime.
	Detail string

	rv  uint64      // resourceVersion of the first write that showed the deletion
	pod *corev1.Pod // the pod as last seen before the deletion
	// madeAt is when the API server says the delete was made
	// (deletionTimestamp minus the grace period); zero if unknown.
	madeAt time.Time
}

// Auditor records deletions and reports while it runs.
type Auditor struct {
	mu        sync.Mutex
	pods      map[types.UID]*corev1.Pod
	sightings map[types.NamespacedName][]Sighting // every version of each session, reduced
	lastRV    map[types.NamespacedName]uint64
	ledger    *RequestLedger
	reused    []nsViolation
	expired   map[types.UID]expiredTurns // highest expiredTurns reported per pod
	deletions map[types.UID]*Deletion
	exempt    map[types.UID]string
	// lost says what the auditor missed (see watchStore); Check fails.
	lost []string
	// upTo is, per watch of etcd, the revision up to which it has
	// delivered every event; catchUp waits until both reach etcd's
	// current revision (nil: nothing to wait for).
	upTo    map[string]int64
	catchUp func(context.Context) error
}

type nsViolation struct{ namespace, msg string }

type expiredTurns struct {
	namespace string
	n         int64
}

func newAuditor() *Auditor {
	return &Auditor{pods: map[types.UID]*corev1.Pod{}, sightings: map[types.NamespacedName][]Sighting{},
		lastRV: map[types.NamespacedName]uint64{}, ledger: NewRequestLedger(), expired: map[types.UID]expiredTurns{},
		deletions: map[types.UID]*Deletion{}, exempt: map[types.UID]string{}, upTo: map[string]int64{}}
}

// Scheme returns the auditor's own scheme: client-go's types and the lull
// API types.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := lullv1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// Start lists and then watches pods and sessions in the etcd at etcdURL
// (the local control plane's, devcluster.Cluster.EtcdURL); it returns once
// what is stored is read. The auditor runs until ctx is done.
func Start(ctx context.Context, etcdURL string) (*Auditor, error) {
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	a := newAuditor()
	if err := a.watchStore(ctx, etcdURL, newStore(scheme)); err != nil {
		return nil, err
	}
	return a, nil
}

// observeSession records one version of a session: its sighting for the
// deletion rules, its drain request in the ledger, its runtime's expired
// turns.
func (a *Auditor) observeSession(s *lullv1.Session, now time.Time) {
	key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
	v := rv(s)
	a.mu.Lock()
	defer a.mu.Unlock()
	if v != 0 && v <= a.lastRV[key] {
		return // a resync, or a version already seen
	}
	a.lastRV[key] = v
	sg := sightingOf(s, now)
	if list := a.sightings[key]; len(list) == 0 || !sameForRules(list[len(list)-1], sg) {
		a.sightings[key] = append(list, sg)
	}
	for _, msg := range a.ledger.Observe(key, s.Status.Drain) {
		a.reused = append(a.reused, nsViolation{s.Namespace, msg})
	}
	if r := s.Status.Runtime; r != nil && r.PodUID != "" && r.ExpiredTurns > a.expired[r.PodUID].n {
		a.expired[r.PodUID] = expiredTurns{namespace: s.Namespace, n: r.ExpiredTurns}
	}
}

// observePod records a session pod, and its deletion the first time a
// deletion shows: a delete, or a scale to zero, which the StatefulSet
// controller carries out as a delete.
func (a *Auditor) observePod(pod *corev1.Pod, gone bool, now time.Time) {
	name := pod.Labels[lullv1.LabelSession]
	if name == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	prev := a.pods[pod.UID]
	a.pods[pod.UID] = pod.DeepCopy()
	if gone {
		delete(a.pods, pod.UID)
	}
	if (!gone && pod.DeletionTimestamp == nil) || a.deletions[pod.UID] != nil {
		return
	}
	// Judge the pod as it was just before the deletion.
	judged := prev
	if judged == nil {
		judged = pod.DeepCopy()
	}
	d := &Deletion{Namespace: pod.Namespace, Session: name, Pod: pod.Name, PodUID: pod.UID, At: now, rv: rv(pod), pod: judged}
	if ts, grace := pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds; ts != nil && grace != nil {
		// The API server's stamp of when the delete was made (its
		// deletionTimestamp is then plus the grace period): a deadline is
		// judged on it, not on when the auditor happened to see it.
		d.madeAt = ts.Add(-time.Duration(*grace) * time.Second)
	}
	a.deletions[pod.UID] = d
}

// rv returns an object's resourceVersion as a number. The API server's etcd
// store uses etcd's global revision, so versions of different objects order
// their writes; the auditor relies on this to tell whether a report was
// written before a deletion, whatever order two watches deliver them in.
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

// Deletions returns every session pod deletion seen so far, oldest first,
// judged on what the auditor has seen of its session so far.
func (a *Auditor) Deletions() []Deletion {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Deletion, 0, len(a.deletions))
	for _, d := range a.deletions {
		out = append(out, judge(*d, a.sightings[types.NamespacedName{Namespace: d.Namespace, Name: d.Session}]))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// judge fills in the rules' findings on d.
func judge(d Deletion, sightings []Sighting) Deletion {
	pod := d.pod
	if pod == nil {
		pod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: d.PodUID}}
	}
	at := d.At
	if !d.madeAt.IsZero() && d.madeAt.Before(at) {
		at = d.madeAt
	}
	g := Judge(pod, d.rv, at, sightings)
	d.Drained, d.DrainedAt, d.RequestID = g.Drained, g.DrainedAt, g.RequestID
	d.Failed, d.FailedReason, d.NeverStarted, d.Forced, d.Detail = g.Failed, g.FailedReason, g.NeverStarted, g.Forced, g.Detail
	d.DeadlinePassed = g.DeadlinePassed
	return d
}

// Report is the auditor's verdict over a run.
type Report struct {
	Deletions   []Deletion
	Completed   int // turns journaled as begun and ended
	Interrupted []journal.Turn
	InFlight    int // turns still open on pods that were not deleted
	Refused     int // turns refused while draining (clients retry)
	// ExpiredTurns is the number of turns whose lease expired before they
	// ended: per pod, the highest status.runtime.expiredTurns reported,
	// summed. Not a violation by itself.
	ExpiredTurns int64
	Violations   []string
}

// catchUpTimeout bounds how long Check waits for its watches to deliver
// what etcd has written: generous, since a fleet bench saturates the
// machine the auditor shares, and a run refused at its end is an hour
// lost; it costs nothing when the watches are caught up.
var catchUpTimeout = 2 * time.Minute

// Check reads the journals in journalDir and judges every deletion seen in
// namespace ns (all namespaces when ns is empty). Under a Drain policy, any
// violation fails the run. It first waits, up to catchUpTimeout, until both
// of its watches have delivered every write etcd had made when it was
// called, so no deletion is judged without a write that came before it;
// an error if they do not, or if the auditor lost history.
func (a *Auditor) Check(journalDir, ns string) (Report, error) {
	a.mu.Lock()
	catchUp := a.catchUp
	a.mu.Unlock()
	if catchUp != nil {
		ctx, cancel := context.WithTimeout(context.Background(), catchUpTimeout)
		err := catchUp(ctx)
		cancel()
		if err != nil {
			return Report{}, fmt.Errorf("%w: the run cannot be judged", err)
		}
	}
	if err := a.lostErr(); err != nil {
		return Report{}, fmt.Errorf("%w: the run cannot be judged", err)
	}
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
	var reused []string
	for _, v := range a.reused {
		if ns == "" || v.namespace == ns {
			reused = append(reused, v.msg)
		}
	}
	for _, e := range a.expired {
		if ns == "" || e.namespace == ns {
			r.ExpiredTurns += e.n
		}
	}
	a.mu.Unlock()
	deleted := map[types.UID]Deletion{}
	for _, d := range a.Deletions() {
		if ns != "" && d.Namespace != ns {
			continue
		}
		if why, ok := exempt[d.PodUID]; ok {
			d.Exempt = why
			if why == "" {
				d.Exempt = "exempted"
			}
		}
		r.Deletions = append(r.Deletions, d)
		deleted[d.PodUID] = d
		if v := DeletionViolation(d); v != "" {
			r.Violations = append(r.Violations, v)
		}
	}
	tv := JudgeTurns(turns, deleted)
	r.Completed, r.InFlight, r.Interrupted = tv.Completed, tv.InFlight, tv.Interrupted
	r.Violations = append(r.Violations, tv.Violations...)
	r.Violations = append(r.Violations, reused...)
	return r, nil
}
