package filesweep

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Defaults of Reconciler's Interval and Grace.
const (
	DefaultInterval = time.Minute
	DefaultGrace    = time.Minute
	// DefaultPassDelay holds a namespace's passes to about one a second
	// while its StatefulSets and pods change (a rollout changes thousands):
	// each pass reads all of them, and sweeping a second later costs
	// nothing.
	DefaultPassDelay = time.Second
)

// Reconciler sweeps the files ConfigMaps of one namespace per request
// (the request's name is empty).
type Reconciler struct {
	// Client lists the candidates (ConfigMaps labelled lull.dev/files)
	// and deletes; with the manager's client, the lists of a first,
	// cheap judgement come from its cache, which holds only lull's
	// StatefulSets and pods.
	Client client.Client
	// APIReader reads every SessionTemplate, StatefulSet and pod of the
	// namespace from the API server for the judgement a delete follows;
	// nil means Client.
	APIReader client.Reader
	// Recorder records FilesSwept on the template; nil records none.
	Recorder events.EventRecorder
	// Clock times the grace period; nil means the real clock.
	Clock clock.PassiveClock
	// Interval is the longest time between two passes of a namespace
	// (the safety pass under the event-driven ones); zero means
	// DefaultInterval.
	Interval time.Duration
	// Grace is how long a ConfigMap's resourceVersion must have been
	// unchanged, as this process observed it, before it may be deleted;
	// zero means DefaultGrace.
	Grace time.Duration
	// PassDelay is how long after a watched event its namespace's pass
	// runs; the events of that time share the pass. Zero means
	// DefaultPassDelay.
	PassDelay time.Duration

	mu sync.Mutex
	// seen holds, by ConfigMap UID, the resourceVersion last observed and
	// since when, and the last judgement on the API server that kept it at
	// that version. It starts empty, so after a start nothing is deleted
	// before Grace has passed; an entry goes with its ConfigMap.
	seen map[types.UID]seenVersion
}

type seenVersion struct {
	namespace string
	Version
	// kept is the last judgement on the API server that kept the
	// ConfigMap at this version; zero if none.
	kept LiveVerdict
}

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch
// +kubebuilder:rbac:groups=lull.dev,resources=sessiontemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile runs one pass over req.Namespace: judge the candidates on the
// cache; if that finds any to delete that a judgement on the API server
// did not keep within the last Interval (Standing), judge again on the
// namespace's templates, StatefulSets and pods read from the API server,
// and delete what that judgement deletes, each with its UID and
// resourceVersion as preconditions. A delete refused by a precondition, or of a ConfigMap
// already gone, is counted in lull_files_sweep_conflicts_total and is not
// an error. The result asks for the next pass within Interval, sooner when
// a ConfigMap stops settling; a namespace with no files ConfigMap (or no
// longer there) asks for none.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ns := req.Namespace
	var cms corev1.ConfigMapList
	if err := r.Client.List(ctx, &cms, client.InNamespace(ns), client.HasLabels{lullv1.LabelFiles}); err != nil {
		return ctrl.Result{}, err
	}
	now := r.now()
	if len(cms.Items) == 0 {
		// Nothing to judge: skip the lists of every StatefulSet and pod
		// (observe still forgets the namespace's ConfigMaps gone since),
		// and forget the namespace: no safety pass is asked for, as the
		// event of a files ConfigMap created later enqueues it again.
		r.observe(ns, nil, now)
		reportKept(ns, Plan{}.Kept())
		return ctrl.Result{}, nil
	}
	o := Observed{ConfigMaps: cms.Items, UnchangedSince: r.observe(ns, cms.Items, now), Now: now, Grace: r.grace()}

	// The cache holds only lull's StatefulSets and pods: a judgement on it
	// can only delete more than the live one, never less, so when it
	// deletes nothing the live reads are skipped.
	if err := r.list(ctx, r.Client, ns, &o); err != nil {
		return ctrl.Result{}, err
	}
	plan := Standing(Decide(o), r.keptLive(ns), now, r.interval())
	if len(plan.Deletes()) > 0 {
		if err := r.list(ctx, r.reader(), ns, &o); err != nil {
			return ctrl.Result{}, err
		}
		plan = Decide(o)
		r.recordKept(plan, now)
	}
	reportKept(ns, plan.Kept())

	var errs []error
	for _, cm := range plan.Deletes() {
		if err := r.delete(ctx, cm, o.Templates); err != nil {
			errs = append(errs, err)
		}
	}
	return ctrl.Result{RequeueAfter: r.next(plan, now)}, errors.Join(errs...)
}

// list fills o's templates, StatefulSets and pods of ns from rd. The
// StatefulSets are read before the pods: a pod created from a StatefulSet
// whose controller had not yet observed its spec is then either in the
// pod list or its StatefulSet is seen lagging (Referenced).
//
// StatefulSets and pods are only read (Decide collects names), so a cache
// lists them without deep copies: with thousands of sessions the copies
// were half the controller's CPU during a rollout.
func (r *Reconciler) list(ctx context.Context, rd client.Reader, ns string, o *Observed) error {
	var tpls lullv1.SessionTemplateList
	if err := rd.List(ctx, &tpls, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("list SessionTemplates: %w", err)
	}
	var sets appsv1.StatefulSetList
	if err := rd.List(ctx, &sets, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("list StatefulSets: %w", err)
	}
	var pods corev1.PodList
	if err := rd.List(ctx, &pods, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	o.Templates, o.StatefulSets, o.Pods = tpls.Items, sets.Items, pods.Items
	return nil
}

// delete deletes cm at the version judged and records the outcome.
func (r *Reconciler) delete(ctx context.Context, cm *corev1.ConfigMap, templates []lullv1.SessionTemplate) error {
	logger := log.FromContext(ctx).WithValues("configMap", client.ObjectKeyFromObject(cm), "resourceVersion", cm.ResourceVersion)
	err := r.Client.Delete(ctx, cm, client.Preconditions{UID: &cm.UID, ResourceVersion: &cm.ResourceVersion})
	switch {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		conflicts.Inc()
		logger.V(1).Info("files ConfigMap changed or went away since it was judged; judging it again at the next pass", "reason", apierrors.ReasonForError(err))
		return nil
	case err != nil:
		return fmt.Errorf("delete ConfigMap %s: %w", cm.Name, err)
	}
	swept.Inc()
	logger.Info("swept files ConfigMap: no template's current files, no StatefulSet or pod names it")
	tpl := cm.Labels[lullv1.LabelTemplate]
	for i := range templates {
		if templates[i].Name == tpl && r.Recorder != nil {
			r.Recorder.Eventf(&templates[i], nil, corev1.EventTypeNormal, lullv1.ReasonFilesSwept, "Sweep",
				"deleted ConfigMap %s (files %s): not the template's current files, and no StatefulSet or pod names it", cm.Name, cm.Labels[lullv1.LabelFiles])
		}
	}
	return nil
}

// observe records the resourceVersion of each of ns's ConfigMaps and
// returns the versions as first seen, forgetting ConfigMaps of ns that are
// gone.
func (r *Reconciler) observe(ns string, cms []corev1.ConfigMap, now time.Time) map[types.UID]Version {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[types.UID]seenVersion{}
	}
	present := make(map[types.UID]bool, len(cms))
	out := make(map[types.UID]Version, len(cms))
	for _, cm := range cms {
		present[cm.UID] = true
		s, ok := r.seen[cm.UID]
		if !ok || s.ResourceVersion != cm.ResourceVersion {
			s = seenVersion{namespace: ns, Version: Version{ResourceVersion: cm.ResourceVersion, Since: now}}
			r.seen[cm.UID] = s
		}
		out[cm.UID] = s.Version
	}
	for uid, s := range r.seen {
		if s.namespace == ns && !present[uid] {
			delete(r.seen, uid)
		}
	}
	return out
}

// keptLive returns the standing judgements on the API server that kept
// ConfigMaps of ns, by UID (see Standing).
func (r *Reconciler) keptLive(ns string) map[types.UID]LiveVerdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[types.UID]LiveVerdict{}
	for uid, s := range r.seen {
		if s.namespace == ns && !s.kept.At.IsZero() {
			out[uid] = s.kept
		}
	}
	return out
}

// recordKept records the Keep verdicts of p, a judgement on the API
// server made at now, on the ConfigMaps' observed versions.
func (r *Reconciler) recordKept(p Plan, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range p.Verdicts {
		s, ok := r.seen[v.ConfigMap.UID]
		if v.Delete || !ok || s.ResourceVersion != v.ConfigMap.ResourceVersion {
			continue
		}
		s.kept = LiveVerdict{ResourceVersion: v.ConfigMap.ResourceVersion, Reason: v.Reason, At: now}
		r.seen[v.ConfigMap.UID] = s
	}
}

// next is how long until the next pass: Interval, or sooner when a
// ConfigMap stops settling before that.
func (r *Reconciler) next(p Plan, now time.Time) time.Duration {
	wait := r.interval()
	if !p.NextCheck.IsZero() {
		// A little after: a pass at the exact instant would find it
		// still settling.
		if d := p.NextCheck.Sub(now) + 100*time.Millisecond; d < wait {
			wait = d
		}
	}
	return wait
}

func (r *Reconciler) interval() time.Duration {
	if r.Interval <= 0 {
		return DefaultInterval
	}
	return r.Interval
}

func (r *Reconciler) grace() time.Duration {
	if r.Grace <= 0 {
		return DefaultGrace
	}
	return r.Grace
}

func (r *Reconciler) reader() client.Reader {
	if r.APIReader == nil {
		return r.Client
	}
	return r.APIReader
}

func (r *Reconciler) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}
