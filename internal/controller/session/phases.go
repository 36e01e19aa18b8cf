// The phases of one reconcile of a session, in the order they run: each
// gathers or ensures one thing and hands on to the next, or ends the
// reconcile.

package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/catalog"
	"lull.dev/lull/internal/lifecycle"
	"lull.dev/lull/internal/render"
	"lull.dev/lull/internal/rollout"
)

// reconcileSession runs the phases of one session, in order: its
// predecessor's orphans, template, identity, the observation the rollout
// decides on, files, the catalog's gate on the runtime image, StatefulSet,
// Service, the budget that holds evictions off (nodeDrainPolicy), another
// controller's refusal of its pod, the rollout step, and
// the status. A phase either hands on to the next, with the look-again it
// asks for, or ends the reconcile with its own result (the session
// blocked, a write to be retried, an error). The reconcile's look-again is
// the soonest the phases ask for (rollout.Soonest). A name whose Session
// no longer exists has its orphans reaped (sessionGone).
func (r *Reconciler) reconcileSession(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	s := &lullv1.Session{}
	if err := r.Client.Get(ctx, req.NamespacedName, s); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.sessionGone(ctx, req.NamespacedName)
	}
	if s.DeletionTimestamp != nil {
		return ctrl.Result{}, nil // owner references let the garbage collector remove the rest
	}
	// One clock reading for the whole reconcile: the rollout decides on
	// it, and the restores of another writer's edits are spaced on it.
	now := r.now()
	sc := &sessionScope{key: req.NamespacedName, session: s, now: now, restoring: restoring{streaks: &r.restores, now: now}}
	var result ctrl.Result
	for _, phase := range []sessionPhase{
		r.reconcilePredecessor,
		r.reconcileTemplate,
		r.reconcileIdentity,
		r.observe,
		r.reconcileFiles,
		r.reconcileImage,
		r.reconcileStatefulSet,
		r.reconcileService,
		r.reconcileBudget,
		r.reconcileCreateRefusal,
		r.reconcileRolloutStep,
		r.reconcileStatus,
	} {
		pr, err := phase(ctx, sc)
		if err != nil || pr.done {
			if err != nil || pr.Result == retryStep {
				r.recordStartOnEnd(ctx, sc)
			}
			return sc.waits.lookAgain(pr.Result, err, now)
		}
		result.RequeueAfter = rollout.Soonest(result.RequeueAfter, pr.RequeueAfter)
	}
	// A restore that waits (another writer keeps changing an object
	// back) is written once its wait ends.
	return sc.waits.lookAgain(result, nil, now)
}

// recordStartOnEnd records a start of the session's runtime that only
// its report shows (rollout.RecordStart) when the reconcile ends without
// a status write: on an error (a write refused by a webhook that is down,
// an API server that failed) or a step decided again (retryStep; a write
// the catalog on the API server refuses while the cache lags). Each such
// end is retried, and may be for a long time, while a later write to
// status.runtime can erase the only evidence (see NeverStarted). A phase
// before observe has not read the pod: it is read here. A write that
// fails is left to the next reconcile, which sees the report again if it
// is still there. The write carries no resourceVersion
// (writeStartRecord): an end may be a status write another writer's
// change refused, and the record is true of the report as it was seen,
// whatever was written since.
func (r *Reconciler) recordStartOnEnd(ctx context.Context, sc *sessionScope) {
	o := sc.observed
	if o.Session == nil {
		if sc.template == nil {
			return // the pod of the session's name may still be a predecessor's (reconcilePredecessor)
		}
		pod, err := r.pod(ctx, sc.session)
		if err != nil {
			return
		}
		o = rollout.Observed{Now: sc.now, Session: sc.session, Pod: pod, ReportWrittenAt: ReportWrittenAt(sc.session)}
	}
	if !rollout.RecordStart(o) {
		return
	}
	if err := r.writeStartRecord(ctx, o.Session, rollout.WithStartRecord(o)); err != nil {
		log.FromContext(ctx).V(1).Info("recording the runtime's start before the reconcile ends", "error", err.Error())
	}
}

// sessionScope is what the phases of one reconcile of a session share:
// each phase reads what the phases before it gathered.
type sessionScope struct {
	key types.NamespacedName
	// now is the reconcile's one clock reading.
	now time.Time
	// restoring spaces the restores of objects another writer keeps
	// changing back; waits collects those that must wait, to look again
	// when the first may be written. A wait holds back only what depends
	// on the object restored.
	restoring restoring
	waits     restoreWaits
	// stsHeld says the StatefulSet's restore waits (held): its spec is
	// not lull's, so no step acts on it (heldForRestore).
	stsHeld bool
	held    errRestoreDeferred
	// session is the Session as read; a status write refreshes it from
	// the API server's response.
	session *lullv1.Session
	// template is the session's SessionTemplate (reconcileTemplate).
	template *lullv1.SessionTemplate
	// decidedOn is the resourceVersion of the session's StatefulSet as
	// read before its pod, "" when there is none (observe): a scale-down
	// decided on what follows lands only on that version.
	decidedOn string
	// observed is what the rollout decides on (observe), its StatefulSet
	// as ensured (reconcileStatefulSet).
	observed rollout.Observed
	// replicas is the replica count the session's StatefulSet must have
	// (rollout.Replicas of observed; observe).
	replicas int32
	// gate is the catalog's verdict on the runtime image (reconcileImage).
	gate ImageGate
	// judgement is the session's lifecycle judgement, made once per
	// reconcile; action is the rollout step as carried out, and committed
	// says that step wrote the session's status itself
	// (reconcileRolloutStep).
	judgement lifecycle.Judgement
	action    rollout.Action
	committed bool
}

// A sessionPhase is one phase of reconcileSession over the scope the
// phases before it gathered. An error ends the reconcile.
type sessionPhase func(ctx context.Context, sc *sessionScope) (phaseResult, error)

// phaseResult is what a phase returns besides an error. done ends the
// reconcile with Result as it is; otherwise the next phase runs, and a
// non-zero RequeueAfter is one reason to look at the session again.
type phaseResult struct {
	ctrl.Result
	done bool
}

// proceed hands on to the next phase, asking to look again after that
// long (0: no reason to).
func proceed(after time.Duration) (phaseResult, error) {
	return phaseResult{Result: ctrl.Result{RequeueAfter: after}}, nil
}

// end ends the reconcile with result and err, as blocked, renderFailed
// and waitForFiles return them.
func end(result ctrl.Result, err error) (phaseResult, error) {
	return phaseResult{Result: result, done: true}, err
}

// sessionGone forgets what the reconciler remembers of a Session that no
// longer exists and reaps the objects it left: a Session deleted with
// --cascade=orphan leaves them, and the watches enqueue its name for every
// object labelled with it.
func (r *Reconciler) sessionGone(ctx context.Context, key types.NamespacedName) error {
	r.passing.forget(key.String())
	r.reused.forget(key)
	r.restores.forget(key)
	r.budgets.forget(key)
	_, err := r.reapOrphans(ctx, key, nil)
	return err
}

// reconcilePredecessor reaps what a predecessor of the session's name left
// (reapOrphans) before anything is rendered: a StatefulSet created while a
// predecessor's pod of its name is left would adopt that pod (its
// runtime, workspace and user). Until those objects are gone the session
// is blocked (PredecessorTerminating).
func (r *Reconciler) reconcilePredecessor(ctx context.Context, sc *sessionScope) (phaseResult, error) {
	reaped, err := r.reapOrphans(ctx, sc.key, sc.session)
	if err != nil {
		return phaseResult{}, err
	}
	if len(reaped.left) > 0 && !reaped.ownStatefulSet {
		return end(r.blockedWith(ctx, sc.session, nil, lullv1.ReasonPredecessorTerminating, waitMessage(reaped.left)))
	}
	return proceed(0)
}

// reconcileTemplate reads the session's SessionTemplate; a session whose
// template does not exist is blocked (TemplateNotFound).
func (r *Reconciler) reconcileTemplate(ctx context.Context, sc *sessionScope) (phaseResult, error) {
	s, t := sc.session, &lullv1.SessionTemplate{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Spec.TemplateRef.Name}, t); err != nil {
		if !apierrors.IsNotFound(err) {
			return phaseResult{}, err
		}
		return end(r.blocked(ctx, s, lullv1.ReasonTemplateNotFound,
			fmt.Sprintf("SessionTemplate %q not found in namespace %s; create it or fix spec.templateRef.name", s.Spec.TemplateRef.Name, s.Namespace)))
	}
	sc.template = t
	return proceed(0)
}

// reconcileIdentity ensures the session's runtime identity
// (ensureIdentity), with an Event for each drift it undid; an identity
// that cannot be rendered or that the API server refuses blocks the
// session (renderFailed).
func (r *Reconciler) reconcileIdentity(ctx context.Context, sc *sessionScope) (phaseResult, error) {
	drifts, err := ensureIdentity(ctx, r.Client, r.reader(), sc.session, sc.restoring)
	r.recordDrift(ctx, sc.session, drifts...)
	if err := sc.waits.take(ctx, err); err != nil {
		return end(r.renderFailed(ctx, sc.session, err))
	}
	return proceed(0)
}

// observe reads what the rollout decides on: the version of the session's
// StatefulSet, then its pod and the Node it runs on (and, that node being
// drained, the claim that holds the pod there), then the claims that keep that pod from
// starting, and the replica count the StatefulSet must have. The version
// is read before the pod: a pod created after this read moves the
// StatefulSet's status, so a scale-down decided on what follows lands
// only if no pod came since (see lockedPatch).
func (r *Reconciler) observe(ctx context.Context, sc *sessionScope) (phaseResult, error) {
	s, t := sc.session, sc.template
	decidedOn, err := r.statefulSetVersion(ctx, s)
	if err != nil {
		return phaseResult{}, err
	}
	pod, err := r.pod(ctx, s)
	if err != nil {
		return phaseResult{}, err
	}
	node, nodeGone, err := r.podNode(ctx, pod)
	if err != nil {
		return phaseResult{}, err
	}
	overlapping, err := r.overlappingBudgets(ctx, s, t, pod)
	if err != nil {
		return phaseResult{}, err
	}
	pinned, err := r.pinnedClaim(ctx, t, pod, node)
	if err != nil {
		return phaseResult{}, err
	}
	o := rollout.Observed{Now: sc.now, Session: s, Policy: rollout.EffectivePolicy(t, render.TemplateRevision(t)), Pod: pod, Admitted: rollout.Admitted(t.Status.Wave, s),
		Lifecycle: lifecycle.PolicyFor(t, s), ReportWrittenAt: ReportWrittenAt(s), ForcedBy: forceUpdateManager(s),
		Node: node, NodeGone: nodeGone, NodeDrain: t.Spec.NodeDrainPolicy, OverlappingBudgets: overlapping, Pinned: pinned}
	if o.PendingClaims, err = pendingClaims(ctx, r.reader(), s, t, pod); err != nil {
		return phaseResult{}, err
	}
	sc.decidedOn, sc.observed, sc.replicas = decidedOn, o, rollout.Replicas(o)
	return proceed(0)
}

// reconcileFiles waits, before the StatefulSet, for the template's files
// ConfigMap: the StatefulSet's pod template must never name one that does
// not exist. The template controller creates it (waitForFiles).
func (r *Reconciler) reconcileFiles(ctx context.Context, sc *sessionScope) (phaseResult, error) {
	if err := filesReady(ctx, r.Client, r.reader(), sc.template); err != nil {
		return end(r.waitForFiles(ctx, sc.key, sc.session, err))
	}
	return proceed(0)
}

// reconcileImage asks the catalog about the session's runtime image
// (gateImage): a session whose image it refuses and that has no allowed
// image to keep is blocked (ImageNotAllowed); one that keeps the image it
// runs is held (reconcileStatefulSet, reconcileStatus).
func (r *Reconciler) reconcileImage(ctx context.Context, sc *sessionScope) (phaseResult, error) {
	gate, err := r.gateImage(ctx, sc.session, sc.template, sc.replicas)
	switch {
	case err != nil:
		return phaseResult{}, err
	case gate.Block:
		return end(r.blocked(ctx, sc.session, lullv1.ReasonImageNotAllowed, gate.Message))
	}
	sc.gate = gate
	return proceed(0)
}

// reconcileStatefulSet ensures the session's StatefulSet as its template
// renders it (ensureStatefulSet, with an Event for a drift it undid), or,
// under the catalog's hold, only its replicas (holdStatefulSet). A restore
// deferred, as another writer keeps changing the StatefulSet back, ends
// the reconcile until lull's next restore: its spec is not lull's, so no
// step is taken on it. A scale-down refused because the StatefulSet moved
// past decidedOn, or a resume, create or change of the runtime image the
// catalog on the API server refuses (confirmWrite), is decided again
// (retryStep).
func (r *Reconciler) reconcileStatefulSet(ctx context.Context, sc *sessionScope) (phaseResult, error) {
	s, o := sc.session, &sc.observed
	var err error
	var drift string
	if sc.gate.Hold {
		o.StatefulSet, drift, err = r.hold(ctx, s, sc.template, o.Pod, sc.replicas, sc.decidedOn, o.Now)
	} else {
		o.StatefulSet, drift, err = ensureStatefulSet(ctx, r.Client, r.reader(), s, sc.template, sc.replicas, sc.decidedOn, o.Now, &r.restores)
	}
	r.recordDrift(ctx, s, drift)
	// Another writer keeps changing the StatefulSet back: its spec is not
	// lull's, so until lull's next restore no step acts on it
	// (heldForRestore); steps that only make the session safer go on.
	sc.stsHeld = errors.As(err, &sc.held)
	err = sc.waits.take(ctx, err)
	var foreign errHeldForeign
	switch {
	case errors.As(err, &foreign):
		// Held, and another writer's spec there that no image of the
		// template renders back: no step on a spec that is not lull's.
		return end(r.blocked(ctx, s, lullv1.ReasonImageNotAllowed, sc.gate.Message+"; "+foreign.Error()))
	case apierrors.IsConflict(err):
		// A scale-down decided on a StatefulSet version the API server
		// has moved past (a pod came or went since), or a write that
		// raises it from zero replicas onto, or changes its pod template
		// to, an image the catalog on the API server refuses, which the
		// gate judged on cached copies (confirmWrite): refused, as it
		// should be. Decide again on the
		// newer versions; not an error.
		log.FromContext(ctx).V(1).Info("StatefulSet or catalog changed since the write was decided; reconciling again", "decidedOn", sc.decidedOn, "reason", err.Error())
		return end(retryStep, nil)
	case err != nil:
		return end(r.waitForFiles(ctx, sc.key, s, err)) // touchFiles may find it swept
	}
	return proceed(0)
}

// reconcileService ensures the session's Service (ensureService), with an
// Event for a drift it undid, after the StatefulSet: a template the
// StatefulSet's render or the API server refuses leaves the Service
// routing to the running pod as it was. A Service that cannot be rendered
// or is refused blocks the session (renderFailed).
func (r *Reconciler) reconcileService(ctx context.Context, sc *sessionScope) (phaseResult, error) {
	drift, err := ensureService(ctx, r.Client, r.reader(), sc.session, sc.template, sc.restoring)
	r.recordDrift(ctx, sc.session, drift)
	if err := sc.waits.take(ctx, err); err != nil {
		return end(r.renderFailed(ctx, sc.session, err))
	}
	return proceed(0)
}

// reconcileCreateRefusal blocks a session that has no pod because the
// StatefulSet controller's create of it is refused (createRefusal): the
// session says why, as for a refusal of lull's own writes, and the create
// is asked for again on the blocked schedule (retryCreate).
func (r *Reconciler) reconcileCreateRefusal(ctx context.Context, sc *sessionScope) (phaseResult, error) {
	o := sc.observed
	refusal, err := r.createRefusal(ctx, o, sc.template)
	if err != nil {
		return phaseResult{}, err
	}
	if refusal == nil {
		return proceed(0)
	}
	// A retry of the create while the StatefulSet's restore waits would
	// have the StatefulSet controller create the pod from another
	// writer's spec.
	if !sc.stsHeld {
		if err := r.retryCreate(ctx, sc.session, o.StatefulSet, refusal, o.Now); err != nil {
			return phaseResult{}, err
		}
	}
	return end(r.blockedWith(ctx, sc.session, nil, refusal.Reason, refusal.Message))
}

// reconcileRolloutStep judges the session's lifecycle, once per reconcile
// (rollout.Judge), decides the rollout step on that judgement
// (rollout.Decide) and carries it out (execute), a destructive step only
// once the StatefulSet and the catalog on the API server are those it was
// decided on (confirmStatefulSet; otherwise it is decided again at once,
// retryStep). It asks to look again
// when the step does, and when the clock alone changes the judgement (a
// cull or a lifetime deadline comes, a pod's grace for its first report
// ends), a tenth of a second after.
func (r *Reconciler) reconcileRolloutStep(ctx context.Context, sc *sessionScope) (phaseResult, error) {
	// Whatever put the image there (a template the catalog listed then,
	// another writer), no pod is replaced onto one it refuses now.
	cat, err := catalog.Read(ctx, r.Client)
	if err != nil {
		return phaseResult{}, err
	}
	sc.observed.ImageRefused = imageRefused(cat, sc.observed.StatefulSet)
	o := sc.observed
	j := rollout.Judge(o)
	a := rollout.Decide(o, j)
	if sc.stsHeld {
		a = heldForRestore(o, a, sc.held)
	}
	if rollout.TakesBackHandOff(o) {
		// A pod labelled lull.dev/drained that must stay under its
		// budget: another writer's label, or a replacement the catalog
		// holds. Taken back before anything else, so no evictor finishes
		// what lull does not.
		if err := r.takeBack(ctx, o.Pod); err != nil {
			return phaseResult{}, err
		}
	}
	if destructive(a) && rollout.NodeDrainStep(a) {
		// The node's disruption is the one fact such a step rests on
		// that neither the commitment nor the delete covers: judged on
		// the Node as the API server holds it. Uncordoned since the
		// cache showed it, the step is decided again.
		if still, err := r.nodeStillDisrupted(ctx, o.Pod); err != nil {
			return phaseResult{}, err
		} else if !still {
			log.FromContext(ctx).Info("node no longer disrupted on the API server; reconciling again", "node", o.Pod.Spec.NodeName, "step", a.Kind)
			return end(retryStep, nil)
		}
	}
	if destructive(a) {
		// Every destructive step is judged on the StatefulSet as the API
		// server holds it: the StatefulSet controller creates the pod's
		// successor from that copy, and neither the commitment (on the
		// Session's resourceVersion) nor the delete (on the pod's UID)
		// would notice another writer's image, or a narrowed catalog, the
		// cache has not shown yet. A step decided on another copy is not
		// taken; the next reconcile restores or refuses as usual.
		moved, err := r.confirmStatefulSet(ctx, o)
		if err != nil {
			return phaseResult{}, err
		}
		if moved != "" {
			log.FromContext(ctx).Info("StatefulSet or catalog changed since the step was decided; reconciling again", "step", a.Kind, "change", moved)
			return end(retryStep, nil)
		}
	}
	a, committed, err := r.execute(ctx, o, j, a)
	if err != nil {
		return phaseResult{}, err
	}
	sc.judgement, sc.action, sc.committed = j, a, committed
	var judgedAgain time.Duration
	if next := j.NextCheck; !next.IsZero() {
		judgedAgain = next.Sub(o.Now) + time.Second/10
	}
	return proceed(rollout.Soonest(a.RequeueAfter, judgedAgain))
}

// reconcileStatus writes the session's status after the step
// (rollout.NextStatus, with the catalog's hold) and records the Events
// that follow it (writeAndRecord), unless the step wrote it itself (a
// commitment) or what it would show is a passing state (settle), looked
// at again once it has lasted. A write the API server refuses because the
// session changed since it was read is computed again (retryStep).
func (r *Reconciler) reconcileStatus(ctx context.Context, sc *sessionScope) (phaseResult, error) {
	if sc.committed {
		return proceed(0) // the commit was this step's status write
	}
	s, o, a := sc.session, sc.observed, sc.action
	if wait := r.settle(sc.key, o, a); wait > 0 {
		return proceed(wait)
	}
	next := rollout.NextStatus(o, sc.judgement, a)
	if sc.gate.Hold {
		holdConditions(&next.Conditions, s.Generation, sc.gate.Message, o.Now)
	}
	if err := r.writeAndRecord(ctx, o, next, a); apierrors.IsConflict(err) {
		// The status was computed from a version the API server has
		// moved past (the runtime reported, the spec changed, the cache is
		// behind): the compare-and-swap refused it, as it should. Compute
		// it again from the newer version; this is not an error.
		log.FromContext(ctx).V(1).Info("session changed since it was read; reconciling again", "resourceVersion", s.ResourceVersion)
		return end(retryStep, nil)
	} else if err != nil {
		return phaseResult{}, err
	}
	if a.Kind == rollout.RequestDrain {
		actions.WithLabelValues(string(a.Kind), a.Reason).Inc()
		if a.Reason == lullv1.ReasonLifetime {
			culls.WithLabelValues(string(lullv1.DrainReasonLifetime)).Inc()
		}
		log.FromContext(ctx).Info("requested drain", "pod", o.Pod.Name, "request", a.Drain.RequestID, "reason", a.Drain.Reason)
	}
	return proceed(0)
}
