// Package template holds the SessionTemplate reconciler, the one writer of
// a template's status and of its files ConfigMap. For each template it
// makes the content-addressed ConfigMap of spec.files exist (files.Create,
// with backoff when the API server refuses it, and the FilesReady
// condition), judges the runtime image against the catalog (ImageAllowed),
// and writes the status rollout.NextTemplateStatus plans from the
// template's sessions: the counts `kubectl get sessiontemplates` and `lull
// status` show, the brake that pauses a revision whose new pods fail, and
// the wave, the places of the sessions admitted to move under
// maxUnavailable, whose places never taken up it revokes. It records a
// Warning Event when the brake, a break-glass, the catalog or the files
// stop the rollout.
package template

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/catalog"
	"lull.dev/lull/internal/index"
	"lull.dev/lull/internal/mergepatch"
	"lull.dev/lull/internal/rollout"
)

// MinWriteInterval is the least time between two status writes of one
// template: during a rollout every session changes several times, and the
// counts need not be fresher than this.
const MinWriteInterval = time.Second

// Reconciler writes SessionTemplate status.
type Reconciler struct {
	Client client.Client
	// APIReader reads from the API server, not the cache: sessions before
	// a place in the wave is revoked as never taken up, and a files
	// ConfigMap whose create met AlreadyExists. Nil means Client.
	APIReader client.Reader
	// Recorder records the template's Warning Events (the brake, a
	// break-glass in force, files that cannot be made); nil records none.
	Recorder recorder.EventRecorder
	// Clock spaces status writes; nil means the real clock.
	Clock clock.PassiveClock
	// ForgetTemplateMetrics, when set, is called with a template's
	// namespace and name once the template is found gone, to drop the
	// metric series other controllers keep by template (the manager
	// passes the session controller's session.ForgetTemplateMetrics, so
	// this controller does not import that one); nil drops none.
	ForgetTemplateMetrics func(namespace, name string)

	mu sync.Mutex
	// lastWrite holds, by template, the UID of the template written and
	// when; dropped with the template, and not reused by a template of
	// another UID that takes its name.
	lastWrite map[types.NamespacedName]lastWrite
	drains    drainClock
	files     filesBackoff
}

// lastWrite is when the template of UID uid had its status last written.
type lastWrite struct {
	uid types.UID
	at  time.Time
}

// +kubebuilder:rbac:groups=lull.dev,resources=sessiontemplates/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=lull.dev,resources=sessions/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile makes the ConfigMap of one template's files and recounts its
// sessions.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	t := &lullv1.SessionTemplate{}
	if err := r.Client.Get(ctx, req.NamespacedName, t); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	files, filesRetry, err := r.reconcileFiles(ctx, t)
	if err != nil {
		return ctrl.Result{}, err
	}
	// The sessions are only read (the planner is pure; refresh replaces
	// elements, never edits one), so the cache hands them out without
	// deep copies: a template of thousands of sessions is recounted on
	// every change of one of them.
	var list lullv1.SessionList
	if err := r.Client.List(ctx, &list, client.InNamespace(t.Namespace), client.MatchingFields{index.SessionTemplateName: t.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, err
	}
	now := r.now()
	if err := r.revokeLapsed(ctx, list.Items, rollout.PlacesToRevoke(t.Status.Wave, list.Items, now), now); err != nil {
		return ctrl.Result{}, err
	}
	r.drains.observe(req.NamespacedName, t.UID, list.Items, now)
	mean, measured := r.drains.meanOf(req.NamespacedName)
	cat, err := catalog.Read(ctx, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	// The catalog's verdict is an input of the plan (no admission while
	// the image is refused); t keeps the status as the API server has it.
	judged := t.DeepCopy()
	meta.SetStatusCondition(&judged.Status.Conditions, ImageCondition(t, cat))
	next, requeue := rollout.NextTemplateStatus(judged, list.Items, now, mean, measured)
	setFilesCondition(&next, files)
	result := ctrl.Result{RequeueAfter: rollout.Soonest(requeue, filesRetry)}
	if equality.Semantic.DeepEqual(t.Status, next) {
		return result, nil
	}
	if wait := r.untilWriteAllowed(req.NamespacedName, t.UID); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	before := t.Status
	body, err := statusPatch(next, t.ResourceVersion)
	if err != nil {
		return ctrl.Result{}, err
	}
	err = r.Client.Status().Patch(ctx, t, client.RawPatch(types.MergePatchType, body), client.FieldOwner(lullv1.FieldManagerController))
	switch {
	case apierrors.IsConflict(err):
		// The template changed since the cache showed it (another writer,
		// or the cache is behind): plan again from the newer version.
		return ctrl.Result{RequeueAfter: MinWriteInterval}, nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("patch status of template %s: %w", t.Name, err)
	}
	r.recordTransitions(t, before, next)
	return result, nil
}

// recordTransitions records a Warning Event when the brake stops a
// revision, when a break-glass comes into force, when the catalog stops
// the template's image, and when FilesReady turns False or changes its
// False reason (not on each retry).
func (r *Reconciler) recordTransitions(t *lullv1.SessionTemplate, before, after lullv1.SessionTemplateStatus) {
	if r.Recorder == nil {
		return
	}
	was := func(typ, reason string) bool {
		c := meta.FindStatusCondition(before.Conditions, typ)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == reason
	}
	if c := meta.FindStatusCondition(after.Conditions, lullv1.ConditionRolloutPaused); c != nil && c.Status == metav1.ConditionTrue && !was(c.Type, c.Reason) {
		r.Recorder.Eventf(t, nil, corev1.EventTypeWarning, c.Reason, "PauseRollout", c.Message)
	}
	if c := meta.FindStatusCondition(after.Conditions, lullv1.ConditionBreakGlass); c != nil && c.Status == metav1.ConditionTrue && !was(c.Type, c.Reason) {
		r.Recorder.Eventf(t, nil, corev1.EventTypeWarning, lullv1.ReasonBreakGlass, "ForceRollout", c.Message)
	}
	if c := meta.FindStatusCondition(after.Conditions, lullv1.ConditionImageAllowed); c != nil && c.Status == metav1.ConditionFalse {
		if b := meta.FindStatusCondition(before.Conditions, c.Type); b == nil || b.Status != metav1.ConditionFalse {
			r.Recorder.Eventf(t, nil, corev1.EventTypeWarning, c.Reason, "HoldRollout", c.Message)
		}
	}
	if c := FilesEvent(before, after); c != nil {
		r.Recorder.Eventf(t, nil, corev1.EventTypeWarning, c.Reason, "CreateFiles", c.Message)
	}
}

// revokeLapsed takes back the wave places lapsed at now, and those of
// suspended sessions not taken up (rollout.PlacesToRevoke), each on its
// session: it reads the session from the API server and, when that version
// shows the place still to be revoked (rollout.Revocable), writes status.revokedAdmission
// with that version's resourceVersion as a precondition. The session's
// own request under the place is written the same way, so exactly one of
// the two lands. Each session of list named in lapsed is replaced by its
// version on the API server, with the revoke when it landed: PlanWave
// releases a place only once it shows revoked. A revoke refused with a
// Conflict (the session changed since the read: it may have taken the
// place up) or a session gone leaves its place held for the next plan.
func (r *Reconciler) revokeLapsed(ctx context.Context, list []lullv1.Session, lapsed []lullv1.WaveEntry, now time.Time) error {
	if len(lapsed) == 0 {
		return nil
	}
	places := map[string]lullv1.WaveEntry{}
	for _, e := range lapsed {
		places[e.Session] = e
	}
	for i := range list {
		e, ok := places[list[i].Name]
		if !ok {
			continue
		}
		live := &lullv1.Session{}
		err := r.reader().Get(ctx, client.ObjectKeyFromObject(&list[i]), live)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return err
		}
		list[i] = *live
		if !rollout.Revocable(e, live, now) {
			continue // taken up after all, or already revoked
		}
		body, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": live.ResourceVersion},
			"status":   map[string]any{"revokedAdmission": lullv1.RevokedAdmission{Sequence: e.Sequence, AdmittedAt: e.AdmittedAt}},
		})
		if err != nil {
			return err
		}
		err = r.Client.Status().Patch(ctx, live, client.RawPatch(types.MergePatchType, body), client.FieldOwner(lullv1.FieldManagerController))
		switch {
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			continue
		case err != nil:
			return fmt.Errorf("revoke the wave place of session %s: %w", live.Name, err)
		}
		list[i] = *live
		log.FromContext(ctx).Info("revoked an unused wave place", "session", klog.KObj(live), "sequence", e.Sequence, "admittedAt", e.AdmittedAt.UTC().Format(time.RFC3339))
	}
	return nil
}

// reader reads from the API server, bypassing the cache.
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

// untilWriteAllowed returns how long to wait before the next status write of
// the template key (UID uid), and records a write now when none is needed.
func (r *Reconciler) untilWriteAllowed(key types.NamespacedName, uid types.UID) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if last, ok := r.lastWrite[key]; ok && last.uid == uid {
		if wait := last.at.Add(MinWriteInterval).Sub(now); wait > 0 {
			return wait
		}
	}
	if r.lastWrite == nil {
		r.lastWrite = map[types.NamespacedName]lastWrite{}
	}
	r.lastWrite[key] = lastWrite{uid: uid, at: now}
	return 0
}

// forget drops what is held in memory of the template key, gone: its last
// write, its drain clock, its files' tries, its drain histograms' series.
func (r *Reconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	delete(r.lastWrite, key)
	r.mu.Unlock()
	r.drains.forget(key)
	r.files.forget(key)
	if r.ForgetTemplateMetrics != nil {
		r.ForgetTemplateMetrics(key.Namespace, key.Name)
	}
}

// statusPatch is the JSON merge patch that sets a template's status to st,
// on the template version resourceVersion only (the API server refuses it
// with a Conflict otherwise): the wave it carries was planned from that
// version, and must not overwrite a newer one. A cleared oldestStaleSince
// or wave is written as null, not left out (a merge patch keeps what it
// does not mention).
func statusPatch(st lullv1.SessionTemplateStatus, resourceVersion string) ([]byte, error) {
	// A merge patch keeps every key it does not mention: a field left out
	// as empty (omitempty) is written as null, which removes it, so a
	// count back at 0, a pause lifted or a completion time withdrawn
	// reaches the API server.
	status, err := mergepatch.Whole(&st)
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": resourceVersion}, "status": status})
}

// SetupWithManager registers the reconciler; a session change that can
// move its template's status (sessionCounted) recounts the template, a catalog change judges every template's image again, and
// any change of a template's files ConfigMap looks at it again.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("sessiontemplate").
		For(&lullv1.SessionTemplate{}).
		Watches(&lullv1.Session{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			s := o.(*lullv1.Session)
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Spec.TemplateRef.Name}}}
		}), builder.WithPredicates(sessionCounted)).
		Watches(&lullv1.RuntimeCatalog{}, handler.EnqueueRequestsFromMapFunc(r.allTemplates)).
		// A deleted files ConfigMap is made again at once. The cache holds
		// only ConfigMaps labelled lull.dev/files.
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(filesToTemplate)).
		// A quota raised (or freed) retries a refused files ConfigMap at once.
		Watches(&corev1.ResourceQuota{}, handler.EnqueueRequestsFromMapFunc(r.refusedByQuota), builder.WithPredicates(quotaPredicate)).
		Complete(r)
}
