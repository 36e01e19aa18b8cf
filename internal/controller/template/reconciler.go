// Package template holds the SessionTemplate status reconciler: it counts a
// template's sessions by where they are in the rollout, so `kubectl get
// sessiontemplates` and `lull status` show progress at a glance.
package template

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"lull.dev/lull/internal/render"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/controller/session"
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
	// a place in the wave is released as never taken up, and a files
	// ConfigMap whose create met AlreadyExists. Nil means Client.
	APIReader client.Reader
	// Recorder records the template's Warning Events (the brake, a
	// break-glass in force, files that cannot be made); nil records none.
	Recorder recorder.EventRecorder
	// Clock spaces status writes; nil means the real clock.
	Clock clock.PassiveClock

	mu        sync.Mutex
	lastWrite map[types.NamespacedName]time.Time
	drains    drainClock
	files     filesBackoff
}

// +kubebuilder:rbac:groups=lull.dev,resources=sessiontemplates/status,verbs=get;patch;update
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile makes the ConfigMap of one template's files and recounts its
// sessions.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	t := &lullv1.SessionTemplate{}
	if err := r.Client.Get(ctx, req.NamespacedName, t); err != nil {
		if apierrors.IsNotFound(err) {
			r.files.forget(req.NamespacedName)
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
	if err := r.Client.List(ctx, &list, client.InNamespace(t.Namespace), client.MatchingFields{session.IndexTemplateName: t.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, err
	}
	now := r.now()
	if err := r.refresh(ctx, list.Items, rollout.ExpiringAdmissions(t.Status.Wave, list.Items, now)); err != nil {
		return ctrl.Result{}, err
	}
	r.drains.observe(req.NamespacedName, list.Items, now)
	mean, measured := r.drains.meanOf(req.NamespacedName)
	cat, err := session.ReadCatalog(ctx, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	// The catalog's verdict is an input of the plan (no admission while
	// the image is refused); t keeps the status as the API server has it.
	judged := t.DeepCopy()
	meta.SetStatusCondition(&judged.Status.Conditions, ImageCondition(t, cat))
	next, requeue := NextStatus(judged, list.Items, now, mean, measured)
	setFilesCondition(&next, files)
	if filesRetry > 0 && (requeue == 0 || filesRetry < requeue) {
		requeue = filesRetry
	}
	result := ctrl.Result{RequeueAfter: requeue}
	if equality.Semantic.DeepEqual(t.Status, next) {
		return result, nil
	}
	if wait := r.untilWriteAllowed(req.NamespacedName); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	before := t.Status
	body, err := statusPatch(next, t.ResourceVersion)
	if err != nil {
		return ctrl.Result{}, err
	}
	err = r.Client.Status().Patch(ctx, t, client.RawPatch(types.MergePatchType, body), client.FieldOwner(session.FieldManager))
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

// NextStatus is the template's status from its sessions as seen at now:
// the counts (Summarize), the brake, the next wave (at most maxUnavailable
// of the effective policy, none while paused or while t's ImageAllowed
// condition is False), the expected completion
// from the mean move time when one was measured, and the conditions. It
// returns when to look again: the brake's progress deadline, a pod's
// lifetime deadline, an admission never taken up lapsing.
func NextStatus(t *lullv1.SessionTemplate, sessions []lullv1.Session, now time.Time, mean time.Duration, measured bool) (lullv1.SessionTemplateStatus, time.Duration) {
	next := Summarize(t, sessions)
	policy := rollout.EffectivePolicy(t, next.Revision)
	brake := rollout.DecideBrake(t, next.Revision, sessions, now)
	room := rollout.MaxUnavailable(policy, int(next.Sessions-next.Suspended))
	if brake.Paused || meta.IsStatusConditionFalse(t.Status.Conditions, lullv1.ConditionImageAllowed) {
		room = 0 // those moving finish; nobody starts
	}
	passive := policy.Strategy == lullv1.UpdateStrategyPassive
	admitByRevision := next.Revision
	if passive {
		admitByRevision = ""
	}
	next.Wave = rollout.PlanWave(t.Status.Wave, sessions, room, now, admitByRevision)
	next.ExpectedCompletion = nil
	if moving := int(next.Stale - next.UpdatePending); measured && room > 0 && moving > 0 && !passive {
		var previous *time.Time
		if p := t.Status.ExpectedCompletion; p != nil {
			previous = &p.Time
		}
		eta := metav1.NewTime(rollout.ExpectedCompletion(moving, room, mean, now, previous))
		next.ExpectedCompletion = &eta
	}
	if passive && next.Stale > 0 {
		eta, unbounded := rollout.PassiveCompletion(sessions, next.Revision, room > 0)
		next.WithoutDeadline = int32(unbounded)
		if !eta.IsZero() {
			at := metav1.NewTime(eta)
			next.ExpectedCompletion = &at
		}
	}
	next.PausedRevision = brake.PausedRevision
	next.Failing = brake.Failing[:min(len(brake.Failing), 20)]
	setPolicyConditions(t, &next, brake)
	requeue := brake.RequeueAfter
	if at := rollout.NextLifetimeDeadline(sessions, now); !at.IsZero() {
		// A pod reaching its lifetime waits for a place in the wave.
		if wait := at.Sub(now) + time.Second/10; requeue == 0 || wait < requeue {
			requeue = wait
		}
	}
	if at := rollout.NextAdmissionLapse(next.Wave, sessions); !at.IsZero() {
		// An admission never taken up is released only by a plan made
		// after it lapsed (PlanWave: strictly older than the TTL), and no
		// session event need come by then (sessionCounted drops the
		// reports of busy runtimes; idle ones write nothing): without this
		// the session waiting behind it would wait for a resync.
		if wait := at.Sub(now) + time.Second; requeue == 0 || wait < requeue {
			requeue = wait
		}
	}
	return next, requeue
}

// setPolicyConditions sets RolloutPaused from the brake, and BreakGlass
// from spec.breakGlass against the template's revision.
func setPolicyConditions(t *lullv1.SessionTemplate, st *lullv1.SessionTemplateStatus, b rollout.Brake) {
	paused := metav1.Condition{Type: lullv1.ConditionRolloutPaused, Status: metav1.ConditionFalse, Reason: b.Reason, Message: b.Message, ObservedGeneration: t.Generation}
	if b.Paused {
		paused.Status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&st.Conditions, paused)
	bg := t.Spec.BreakGlass
	if bg == nil {
		meta.RemoveStatusCondition(&st.Conditions, lullv1.ConditionBreakGlass)
		return
	}
	by := bg.RequestedBy
	if by == "" {
		by = "unknown"
	}
	c := metav1.Condition{Type: lullv1.ConditionBreakGlass, Status: metav1.ConditionTrue, Reason: lullv1.ReasonBreakGlassActive, ObservedGeneration: t.Generation,
		Message: fmt.Sprintf("break-glass for revision %s, requested by %s: %q; every stale session drains for at most %s, then is replaced", bg.Revision, by, bg.Reason, bg.Grace.Duration)}
	if bg.Revision != st.Revision {
		c.Status, c.Reason = metav1.ConditionFalse, lullv1.ReasonRevisionMismatch
		c.Message = fmt.Sprintf("spec.breakGlass names revision %s, but the template's revision is %s: it applies to nothing (the update policy applies); `lull rollout force %s` names the current one", bg.Revision, st.Revision, t.Name)
	}
	meta.SetStatusCondition(&st.Conditions, c)
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
		r.Recorder.Eventf(t, nil, corev1.EventTypeWarning, "BreakGlass", "ForceRollout", c.Message)
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

// refresh replaces the named sessions of list with their versions on the
// API server.
func (r *Reconciler) refresh(ctx context.Context, list []lullv1.Session, names []string) error {
	if len(names) == 0 {
		return nil
	}
	reader := r.reader()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	for i := range list {
		if !want[list[i].Name] {
			continue
		}
		var live lullv1.Session
		if err := reader.Get(ctx, client.ObjectKeyFromObject(&list[i]), &live); err != nil {
			return client.IgnoreNotFound(err)
		}
		list[i] = live
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
// a template, and records a write now when none is needed.
func (r *Reconciler) untilWriteAllowed(key types.NamespacedName) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if r.Clock != nil {
		now = r.Clock.Now()
	}
	if wait := r.lastWrite[key].Add(MinWriteInterval).Sub(now); wait > 0 {
		return wait
	}
	if r.lastWrite == nil {
		r.lastWrite = map[types.NamespacedName]time.Time{}
	}
	r.lastWrite[key] = now
	return 0
}

// statusPatch is the JSON merge patch that sets a template's status to st,
// on the template version resourceVersion only (the API server refuses it
// with a Conflict otherwise): the wave it carries was planned from that
// version, and must not overwrite a newer one. A cleared oldestStaleSince
// or wave is written as null, not left out (a merge patch keeps what it
// does not mention).
func statusPatch(st lullv1.SessionTemplateStatus, resourceVersion string) ([]byte, error) {
	b, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	fields := map[string]any{}
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, err
	}
	// A merge patch keeps every key it does not mention: a field left out
	// as empty (omitempty) is written as null, which removes it, so a
	// count back at 0, a pause lifted or a completion time withdrawn
	// reaches the API server.
	t := reflect.TypeFor[lullv1.SessionTemplateStatus]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if _, ok := fields[name]; !ok && name != "" && name != "-" {
			fields[name] = nil
		}
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": resourceVersion}, "status": fields})
}

// Summarize counts sessions by rollout state. A session is current when its
// pod runs the template's current revision (status.templateRevision) and
// its UpToDate condition is True; stale otherwise, unless suspended;
// draining when it has a drain request outstanding.
func Summarize(t *lullv1.SessionTemplate, sessions []lullv1.Session) lullv1.SessionTemplateStatus {
	st := lullv1.SessionTemplateStatus{ObservedGeneration: t.Generation, Revision: render.TemplateRevision(t), Conditions: append([]metav1.Condition(nil), t.Status.Conditions...)}
	var blocked []string
	for i := range sessions {
		s := &sessions[i]
		st.Sessions++
		if s.Spec.Suspend {
			st.Suspended++
			continue
		}
		if s.Status.Drain != nil {
			st.Draining++
		}
		c := meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionUpToDate)
		if rollout.Current(s, st.Revision) {
			st.Current++
			continue
		}
		st.Stale++
		switch {
		case c != nil && c.Reason == lullv1.ReasonWaitingForWave:
			st.Waiting++
		case c != nil && c.Reason == lullv1.ReasonUpdatePending:
			st.UpdatePending++
		}
		if c != nil && rollout.Blocked(c.Reason) {
			blocked = append(blocked, fmt.Sprintf("%s (%s)", s.Name, c.Reason))
		}
		// Stale since its UpToDate condition left True; a session whose
		// controller has not yet seen the new revision has no such time
		// yet.
		if c != nil && c.Status != metav1.ConditionTrue {
			if since := c.LastTransitionTime; st.OldestStaleSince == nil || since.Before(st.OldestStaleSince) {
				st.OldestStaleSince = &since
			}
		}
	}
	rolledOut := metav1.Condition{Type: lullv1.ConditionRolledOut, Status: metav1.ConditionTrue, Reason: "AllCurrent",
		Message: fmt.Sprintf("%d of %d running sessions run the update revision", st.Current, st.Sessions-st.Suspended), ObservedGeneration: t.Generation}
	if st.Current < st.Sessions-st.Suspended {
		rolledOut.Status, rolledOut.Reason = metav1.ConditionFalse, "RollingOut"
	}
	if len(blocked) > 0 {
		// Name the sessions that need someone while the others finish;
		// when nothing else is moving, the rollout itself is blocked.
		sort.Strings(blocked)
		if int(st.Current)+len(blocked) == int(st.Sessions-st.Suspended) {
			rolledOut.Reason = "Blocked"
		}
		const shown = 5
		more := ""
		if len(blocked) > shown {
			more = fmt.Sprintf(" and %d more", len(blocked)-shown)
			blocked = blocked[:shown]
		}
		rolledOut.Message += fmt.Sprintf("; blocked: %s%s (see each session's UpToDate condition)", strings.Join(blocked, ", "), more)
	}
	meta.SetStatusCondition(&st.Conditions, rolledOut)
	return st
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
