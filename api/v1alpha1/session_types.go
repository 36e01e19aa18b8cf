package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TemplateReference names a SessionTemplate in the session's namespace.
type TemplateReference struct {
	// Name of the SessionTemplate.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// SessionSpec is what the user asks of one session.
type SessionSpec struct {
	// TemplateRef names the SessionTemplate whose runtime this session runs.
	// It cannot be changed: create a new session to change templates.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.templateRef is immutable; create a new Session to use another template"
	TemplateRef TemplateReference `json:"templateRef"`

	// Suspend scales the session's pod to zero while keeping the session.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// Idle, when set, replaces the template's idle policy for this
	// session (an empty idle: {} means never culled).
	// +optional
	Idle *IdlePolicy `json:"idle,omitempty"`
}

// SessionPhase is a one-word summary of a session; the conditions hold the
// detail.
//
// +kubebuilder:validation:Enum=Pending;Running;Draining;Suspended;Failed
type SessionPhase string

// The phases of a session.
const (
	SessionPending   SessionPhase = "Pending"
	SessionRunning   SessionPhase = "Running"
	SessionDraining  SessionPhase = "Draining"
	SessionSuspended SessionPhase = "Suspended"
	SessionFailed    SessionPhase = "Failed"
)

// DrainReason says why a drain was requested.
//
// +kubebuilder:validation:Enum=Update;Idle;Lifetime;Manual;NodeDrain
type DrainReason string

// The reasons for a drain.
const (
	// DrainReasonUpdate: the pod runs a stale revision.
	DrainReasonUpdate DrainReason = "Update"
	// DrainReasonIdle: the session has been idle past its limit.
	DrainReasonIdle DrainReason = "Idle"
	// DrainReasonLifetime: the session has reached its maximum lifetime.
	DrainReasonLifetime DrainReason = "Lifetime"
	// DrainReasonManual: a user asked for the drain.
	DrainReasonManual DrainReason = "Manual"
	// DrainReasonNodeDrain: the pod's node is being disrupted (cordoned,
	// tainted by a drain, an autoscaler or a node upgrade, or the pod
	// marked DisruptionTarget); the request names the node.
	DrainReasonNodeDrain DrainReason = "NodeDrain"
)

// DrainRequest asks the runtime of one pod to drain. The controller writes
// it; the runtime acts on it only when PodUID is its own.
type DrainRequest struct {
	// RequestID identifies this request: "<reason>-<16 hex>", derived from
	// the pod UID, the reason and the session's drain sequence (see package
	// drain and SessionStatus.DrainSequence), so no two issuings of a
	// request for one pod ever share an ID.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	RequestID string `json:"requestID"`

	// PodUID is the UID of the pod whose runtime must drain.
	PodUID types.UID `json:"podUID"`

	// Reason is why the drain was requested.
	Reason DrainReason `json:"reason"`

	// Revision is the revision the session moves to, for reason Update.
	// +optional
	Revision string `json:"revision,omitempty"`

	// RequestedAt is when the controller first made this request.
	RequestedAt metav1.Time `json:"requestedAt"`

	// Sequence is the session's drain sequence number this request was
	// issued with (SessionStatus.DrainSequence at the time).
	// +optional
	Sequence int64 `json:"sequence,omitempty"`

	// Deadline, when set, is when the pod is replaced even if its runtime
	// has not drained (the template's drainTimeout with onDrainTimeout
	// Replace, or the Replace strategy, whose deadline is the request
	// time), or, with onDrainTimeout Wait, when the drain is overdue. A
	// runtime shows it to its user ("your session restarts for an update
	// in 4m30s").
	// +optional
	Deadline *metav1.Time `json:"deadline,omitempty"`

	// Node, set while the pod drains because its node is disrupted
	// (reason NodeDrain, or an outstanding request of another reason the
	// node drain reuses), names that node: `lull status` and the Session
	// show which node a session drains for.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node,omitempty"`
}

// ReplacementReason says why the controller committed to replace a pod.
// Every destructive step is committed first, whatever its reason: the
// reasons other than Drained are the UpToDate condition's reasons of the
// same name.
//
// +kubebuilder:validation:Enum=Drained;PodFailed;NeverStarted;Forced;Replaced;DrainDeadlineExceeded
type ReplacementReason string

// The reasons for a committed replacement.
const (
	// ReplacementDrained: the pod's runtime reported Drained for the
	// outstanding request, confirmed on the API server.
	ReplacementDrained ReplacementReason = "Drained"
	// ReplacementPodFailed: the pod is terminal or its runtime container
	// cannot start, confirmed by a read of the pod from the API server.
	ReplacementPodFailed ReplacementReason = "PodFailed"
	// ReplacementNeverStarted: the pod's runtime container has never
	// started and its runtime has never reported, so it holds no turn.
	ReplacementNeverStarted ReplacementReason = "NeverStarted"
	// ReplacementForced: lull.dev/force-update replaces the stale pod (or
	// scales a suspended session's pod away) without a drain.
	ReplacementForced ReplacementReason = "Forced"
	// ReplacementReplaced: the Replace strategy replaces the stale pod once
	// its drain request's deadline (the request time) has passed.
	ReplacementReplaced ReplacementReason = "Replaced"
	// ReplacementDrainDeadlineExceeded: the deadline of the drain request
	// (an update's or a lifetime restart's) passed undrained, and
	// onDrainTimeout is Replace.
	ReplacementDrainDeadlineExceeded ReplacementReason = "DrainDeadlineExceeded"
)

// Failed reports whether r replaces a pod that cannot serve (PodFailed,
// NeverStarted): such replacements are counted in FailedReplacements and
// set the replacement backoff.
func (r ReplacementReason) Failed() bool {
	return r == ReplacementPodFailed || r == ReplacementNeverStarted
}

// Replacement records that the controller has committed to replace one pod.
// It is written, with a resourceVersion precondition, after the step was
// confirmed against the API server and before the pod is deleted or scaled
// away. A drain request covered by it is never withdrawn: a controller that
// takes over (a new leader, a restart) finishes the replacement instead of
// reopening a runtime another controller may be about to delete.
type Replacement struct {
	// PodUID is the pod being replaced.
	PodUID types.UID `json:"podUID"`

	// Reason is why the pod is replaced.
	Reason ReplacementReason `json:"reason"`

	// RequestID is the drain request the replacement ends: the one the
	// Drained report answered, or the one outstanding for the pod when it
	// was cut short (its deadline passed, or it was forced). Empty when no
	// request for the pod was outstanding.
	// +optional
	RequestID string `json:"requestID,omitempty"`

	// CommittedAt is when the controller committed to the replacement.
	CommittedAt metav1.Time `json:"committedAt"`
}

// RuntimeState is the drain state a runtime reports.
//
// +kubebuilder:validation:Enum=Serving;Draining;Drained
type RuntimeState string

// The states a runtime reports.
const (
	// RuntimeServing: the runtime accepts turns (no drain request for it, or
	// the request was withdrawn and the runtime has reopened).
	RuntimeServing RuntimeState = "Serving"
	// RuntimeDraining: the runtime refuses new turns and is finishing
	// ActiveTurns accepted ones.
	RuntimeDraining RuntimeState = "Draining"
	// RuntimeDrained: no turn is active and the runtime is sealed: it accepts
	// no turn until the request is withdrawn. Deleting the pod is safe.
	RuntimeDrained RuntimeState = "Drained"
)

// RuntimeReport is the one part of a session's status the runtime writes,
// through the status subresource.
type RuntimeReport struct {
	// PodUID is the UID of the pod the reporting runtime runs in.
	PodUID types.UID `json:"podUID"`

	// RequestID is the drain request this report answers; empty while
	// Serving with no request.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	RequestID string `json:"requestID,omitempty"`

	// State is the runtime's drain state.
	State RuntimeState `json:"state"`

	// ActiveTurns is the number of accepted turns not yet finished.
	// +kubebuilder:validation:Minimum=0
	ActiveTurns int32 `json:"activeTurns"`

	// LastActivity is when the runtime last began or ended a real turn.
	// +optional
	LastActivity *metav1.Time `json:"lastActivity,omitempty"`

	// ExpiredTurns counts the turns whose lease expired before they were
	// ended, since the runtime started. A lease that expires is not a
	// finished turn: the work may still be running in a client that missed
	// its renewal.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ExpiredTurns int64 `json:"expiredTurns,omitempty"`

	// ReportedAt is when the runtime wrote this report.
	// +optional
	ReportedAt *metav1.Time `json:"reportedAt,omitempty"`

	// StartedAt is when the process that wrote this report started, to
	// the second (RFC 3339), on the clock of the pod's node: the clock the
	// kubelet's lastState.terminated.finishedAt of the runtime container
	// is on, as a container reads its node's kernel clock. The runtime SDK
	// sets it from when its Runtime was made; the drain sidecar (lull
	// agent), which does not know when the runtime container's process
	// started, leaves it out. The controller orders it against the
	// runtime container's last termination, on one clock: a report of a
	// run started after it is the restarted runtime's (the pod is not
	// failed). So is a report the API server saw written after it last
	// saw the container's state published, whatever startedAt says (a
	// node clock stepped back between the crash and the restart). One
	// that neither orders after the termination is the run that crashed
	// (the pod is failed); only when startedAt is absent (an older
	// runtime, the agent) is the report's write time also ordered against
	// the termination across clocks (docs/protocol.md, "A report is
	// fresher than a failure"). A wrong value misjudges only the failure
	// of the reporting runtime's own pod.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`

	// RefreshSeconds is the longest the runtime leaves a change of its turn
	// count or activity unwritten (it writes nothing while nothing
	// changes): the granularity of activity the idle policy sees, so a
	// session is culled no sooner than this after its idle limit. 0 (an
	// older runtime) means activity cannot be bounded: never culled.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	RefreshSeconds int32 `json:"refreshSeconds,omitempty"`
}

// SessionStatus is the controller's view of a session, plus the runtime's
// report. The controller and the runtime write disjoint fields: the
// controller never writes Runtime.
type SessionStatus struct {
	// ObservedGeneration is the session generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase summarises the session.
	// +optional
	Phase SessionPhase `json:"phase,omitempty"`

	// PodName is the name of the session's pod.
	// +optional
	PodName string `json:"podName,omitempty"`

	// PodUID is the UID of the session's current pod.
	// +optional
	PodUID types.UID `json:"podUID,omitempty"`

	// StartedPodUID is the session's pod whose runtime the controller has
	// seen started: a status.runtime naming that pod was on the Session. It
	// is the controller's record of that evidence, which a later write to
	// status.runtime (an admin's, a stale writer's) cannot erase: a pod it
	// names is never judged never started. Kept while that pod is the
	// session's pod; empty otherwise.
	// +optional
	StartedPodUID types.UID `json:"startedPodUID,omitempty"`

	// StartedReportTime is when the API server saw written the report the
	// record of StartedPodUID rests on. It moves only when the runtime
	// container has terminated since and the runtime has reported again
	// since that termination (a restart the kubelet has not yet
	// published): a record that is later than the container's last
	// termination shows a live runtime, whatever status.runtime says.
	// +optional
	StartedReportTime *metav1.Time `json:"startedReportTime,omitempty"`

	// StartedRunTime is the startedAt of the report the record of
	// StartedPodUID rests on (RuntimeReport.StartedAt: when the process
	// that wrote it started, on the node's clock); nil when that report
	// carried none. It moves with StartedReportTime. The record is later
	// than the runtime container's last termination when it is, on the
	// node's clock as the termination is, or when StartedReportTime is
	// later than the API server's last publication of the container's
	// state; when set, StartedReportTime is not ordered against the
	// termination across clocks, as a report with startedAt is not.
	// +optional
	StartedRunTime *metav1.Time `json:"startedRunTime,omitempty"`

	// CurrentRevision is the StatefulSet revision the pod runs (its
	// controller-revision-hash label).
	// +optional
	CurrentRevision string `json:"currentRevision,omitempty"`

	// UpdateRevision is the revision the pod should run (the StatefulSet's
	// status.updateRevision).
	// +optional
	UpdateRevision string `json:"updateRevision,omitempty"`

	// TemplateRevision is the template revision the pod runs (its
	// lull.dev/template-revision label; compare SessionTemplate
	// status.revision). StatefulSet revisions are per session; this one is
	// shared by every session of a template.
	// +optional
	TemplateRevision string `json:"templateRevision,omitempty"`

	// Conditions: Ready, UpToDate, Draining, Active.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Drain is the outstanding drain request, if any.
	// +optional
	Drain *DrainRequest `json:"drain,omitempty"`

	// DrainSequence is the number of drain requests issued for this session
	// so far. Each new request takes the next number, and its ID derives
	// from it, so a request ID is never issued twice.
	// +optional
	// +kubebuilder:validation:Minimum=0
	DrainSequence int64 `json:"drainSequence,omitempty"`

	// Replacement is the pod the controller has committed to replace, if
	// any; see Replacement.
	// +optional
	Replacement *Replacement `json:"replacement,omitempty"`

	// FailedReplacements counts replacements of failed stale pods since the
	// session last ran a ready pod; it sets the replacement backoff.
	// +optional
	FailedReplacements int32 `json:"failedReplacements,omitempty"`

	// LastFailedReplacementTime is when the controller last committed to
	// replace a failed (or never-started) stale pod; with
	// FailedReplacements it sets the backoff.
	// +optional
	LastFailedReplacementTime *metav1.Time `json:"lastFailedReplacementTime,omitempty"`

	// Lifecycle is the session's idle clock and when it is culled or
	// restarted if nothing changes.
	// +optional
	Lifecycle *LifecycleStatus `json:"lifecycle,omitempty"`

	// RevokedAdmission is the last place in the template's rollout wave
	// (SessionTemplate status.wave) that the template controller took
	// back from this session unused, once UnusedAdmissionTTL had passed
	// without a drain request under it. No request is issued under a
	// revoked place. The template controller alone writes it, with the
	// resourceVersion of the read that showed the place unused as a
	// precondition, as the session controller writes a request with the
	// resourceVersion it decided on: of a revoke and a request racing for
	// one place, exactly one lands.
	// +optional
	RevokedAdmission *RevokedAdmission `json:"revokedAdmission,omitempty"`

	// Runtime is written by the session's runtime, never by the controller.
	// +optional
	Runtime *RuntimeReport `json:"runtime,omitempty"`
}

// RevokedAdmission names a place of a rollout wave taken back from a
// session: the Sequence and AdmittedAt of its WaveEntry. A place of the
// same sequence admitted later is a new one.
type RevokedAdmission struct {
	// Sequence is the drain sequence number the revoked place was for.
	Sequence int64 `json:"sequence"`
	// AdmittedAt is when the revoked place was admitted.
	AdmittedAt metav1.Time `json:"admittedAt"`
}

// Session is one interactive session: one pod, replaced only between turns.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sess,categories=lull
// +kubebuilder:printcolumn:name="Template",type=string,JSONPath=`.spec.templateRef.name`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Revision",type=string,JSONPath=`.status.templateRevision`
// +kubebuilder:printcolumn:name="UpToDate",type=string,JSONPath=`.status.conditions[?(@.type=="UpToDate")].status`
// +kubebuilder:printcolumn:name="Runtime",type=string,JSONPath=`.status.runtime.state`
// +kubebuilder:printcolumn:name="Turns",type=integer,JSONPath=`.status.runtime.activeTurns`
// +kubebuilder:printcolumn:name="Idle",type=date,JSONPath=`.status.lifecycle.idleSince`
// +kubebuilder:printcolumn:name="Cull",type=string,JSONPath=`.status.lifecycle.cullAction`
// +kubebuilder:printcolumn:name="CullAt",type=string,JSONPath=`.status.lifecycle.cullAt`
// +kubebuilder:printcolumn:name="Restart",type=string,JSONPath=`.status.lifecycle.lifetimeDeadline`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 52",message="metadata.name must be at most 52 characters: it names the session's StatefulSet, whose pods carry a revision label limited to 63"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS-1035 label (lower-case letters, digits and '-', starting with a letter): it names the session's Service"
type Session struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SessionSpec   `json:"spec"`
	Status SessionStatus `json:"status,omitempty"`
}

// SessionList is a list of Sessions.
//
// +kubebuilder:object:root=true
type SessionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Session `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Session{}, &SessionList{})
}
