package session

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/mergepatch"
	"lull.dev/lull/internal/rollout"
)

// controllerStatus is the part of SessionStatus the controller owns, shaped
// as a JSON merge patch (RFC 7386): every field is present, so a cleared
// field is written as null or zero, and status.runtime is absent, so the
// runtime's report is never overwritten, whatever the cache held.
// status.revokedAdmission is absent too: the template controller writes
// it, and a revoked wave place stays revoked.
type controllerStatus struct {
	ObservedGeneration        int64               `json:"observedGeneration"`
	Phase                     lullv1.SessionPhase `json:"phase"`
	PodName                   string              `json:"podName"`
	PodUID                    types.UID           `json:"podUID"`
	StartedPodUID             types.UID           `json:"startedPodUID"`
	StartedReportTime         *metav1.Time        `json:"startedReportTime"`
	StartedRunTime            *metav1.Time        `json:"startedRunTime"`
	CurrentRevision           string              `json:"currentRevision"`
	UpdateRevision            string              `json:"updateRevision"`
	TemplateRevision          string              `json:"templateRevision"`
	Conditions                []metav1.Condition  `json:"conditions"`
	Drain                     json.RawMessage     `json:"drain"`
	DrainSequence             int64               `json:"drainSequence"`
	Replacement               json.RawMessage     `json:"replacement"`
	FailedReplacements        int32               `json:"failedReplacements"`
	LastFailedReplacementTime *metav1.Time        `json:"lastFailedReplacementTime"`
	Lifecycle                 json.RawMessage     `json:"lifecycle"`
}

func ownedPart(st lullv1.SessionStatus) controllerStatus {
	return controllerStatus{
		ObservedGeneration: st.ObservedGeneration, Phase: st.Phase,
		PodName: st.PodName, PodUID: st.PodUID, StartedPodUID: st.StartedPodUID, StartedReportTime: st.StartedReportTime,
		StartedRunTime:  st.StartedRunTime,
		CurrentRevision: st.CurrentRevision, UpdateRevision: st.UpdateRevision, TemplateRevision: st.TemplateRevision,
		Conditions: st.Conditions, Drain: wholeObject(st.Drain), DrainSequence: st.DrainSequence,
		Replacement:        wholeObject(st.Replacement),
		FailedReplacements: st.FailedReplacements, LastFailedReplacementTime: st.LastFailedReplacementTime,
		Lifecycle: wholeObject(st.Lifecycle),
	}
}

// wholeObject encodes a nested object of the status for a JSON merge patch
// so that it replaces the stored object whole (mergepatch.Whole). A merge
// patch keeps every key it does not mention, so a Manual request written
// over an Update one would otherwise keep the Update's revision, and the
// controller would find its status different on every reconcile and patch
// it again, forever. A nil v is null, which removes the object.
func wholeObject[T any](v *T) json.RawMessage {
	b, err := mergepatch.Whole(v)
	if err != nil {
		panic(err) // API types always marshal, and have no embedded fields
	}
	return b
}

// writeStatus patches the controller's part of the session status when it
// differs from what was observed; an unchanged status costs no request.
// The patch carries the observed resourceVersion, so a status computed from
// a stale cache (a reconcile that runs before the cache shows this
// controller's last write) is refused with a Conflict and recomputed,
// instead of reverting that write (lastFailedReplacementTime,
// failedReplacements, the drain request).
func (r *Reconciler) writeStatus(ctx context.Context, s *lullv1.Session, next lullv1.SessionStatus, reason string) error {
	want := ownedPart(next)
	if equality.Semantic.DeepEqual(ownedPart(s.Status), want) {
		return nil
	}
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": s.ResourceVersion},
		"status":   want,
	})
	if err != nil {
		return err
	}
	statusWrites.WithLabelValues(reason).Inc()
	if err := r.Client.Status().Patch(ctx, s, client.RawPatch(types.MergePatchType, body), client.FieldOwner(lullv1.FieldManagerController)); err != nil {
		return fmt.Errorf("patch status of session %s: %w", s.Name, err)
	}
	return nil
}

// writeStartRecord writes the record of a start of st (status.startedPodUID,
// startedReportTime, startedRunTime) and nothing else, with the Session's
// UID but not its resourceVersion as precondition: the record is a fact
// about a report the controller saw in s, true whatever another writer
// wrote to status.runtime since, so a change of the session in between
// must not refuse it (recordStartOnEnd). Only the controller writes the
// record (the admission policy refuses a runtime's write of it), one
// reconcile of a session at a time.
func (r *Reconciler) writeStartRecord(ctx context.Context, s *lullv1.Session, st lullv1.SessionStatus) error {
	if s.Status.StartedPodUID == st.StartedPodUID && equality.Semantic.DeepEqual(s.Status.StartedReportTime, st.StartedReportTime) &&
		equality.Semantic.DeepEqual(s.Status.StartedRunTime, st.StartedRunTime) {
		return nil
	}
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": s.UID},
		"status": map[string]any{"startedPodUID": st.StartedPodUID, "startedReportTime": st.StartedReportTime,
			"startedRunTime": st.StartedRunTime},
	})
	if err != nil {
		return err
	}
	statusWrites.WithLabelValues("StartRecorded").Inc()
	if err := r.Client.Status().Patch(ctx, s, client.RawPatch(types.MergePatchType, body), client.FieldOwner(lullv1.FieldManagerController)); err != nil {
		return fmt.Errorf("record the runtime's start in session %s: %w", s.Name, err)
	}
	return nil
}

// writeAndRecord writes next, the status after step a of the session
// observed in o (writeStatus), and once that write has succeeded records
// the Events that follow it (rollout.Events); a refused write records
// none. The Events are judged before the write, which refreshes o.Session
// from the API server's response.
func (r *Reconciler) writeAndRecord(ctx context.Context, o rollout.Observed, next lullv1.SessionStatus, a rollout.Action) error {
	events := rollout.Events(o, next, a)
	if err := r.writeStatus(ctx, o.Session, next, a.Reason); err != nil {
		return err
	}
	r.record(o.Session, events...)
	return nil
}

// recordStep records the Event of step a of the session observed in o,
// carried out by a write other than a status write (rollout.StepEvent),
// once that write has succeeded.
func (r *Reconciler) recordStep(o rollout.Observed, a rollout.Action) {
	if e, ok := rollout.StepEvent(o, a); ok {
		r.record(o.Session, e)
	}
}

// record records events on s.
func (r *Reconciler) record(s *lullv1.Session, events ...rollout.Event) {
	for _, e := range events {
		r.Recorder.Eventf(s, related(e.Related), e.Type, e.Reason, e.Action, "%s", e.Note)
	}
}
