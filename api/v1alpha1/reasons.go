package v1alpha1

// Reasons of the conditions lull writes and of the Events it records: one
// machine-readable CamelCase word each, read by the controller, the CLI
// (lull status) and the docs alike. The conditions themselves are in
// names.go.

// Reasons of a Session's conditions (Ready, UpToDate, Draining, Active)
// and Events, as the rollout decides them (internal/rollout).
const (
	ReasonSuspended          = "Suspended"
	ReasonSuspending         = "Suspending"
	ReasonStatefulSetPending = "StatefulSetPending"
	ReasonRevisionUnknown    = "RevisionUnknown"
	ReasonPodPending         = "PodPending"
	// ReasonClaimPending: the session's pod waits for a
	// PersistentVolumeClaim (Ready condition only).
	ReasonClaimPending        = "ClaimPending"
	ReasonPodTerminating      = "PodTerminating"
	ReasonPodStuckTerminating = "PodStuckTerminating"
	ReasonPodStarting         = "PodStarting"
	ReasonUpToDate            = "UpToDate"
	ReasonPodFailed           = "PodFailed"
	ReasonNeverStarted        = "NeverStarted"
	ReasonReplacementBackoff  = "ReplacementBackoff"
	ReasonForced              = "Forced"
	// ReasonUpdatePending: under the Passive strategy, the pod runs a
	// stale revision and waits to be replaced for another reason.
	ReasonUpdatePending = "UpdatePending"
	// ReasonReplaced: the Replace strategy replaced a stale pod without a
	// drain.
	ReasonReplaced = "Replaced"
	// ReasonDrainDeadlineExceeded: the drain request's deadline passed and
	// onDrainTimeout is Replace; the pod is replaced.
	ReasonDrainDeadlineExceeded = "DrainDeadlineExceeded"
	// ReasonDrainOverdue: the deadline passed and onDrainTimeout is Wait.
	ReasonDrainOverdue   = "DrainOverdue"
	ReasonDrainRequested = "DrainRequested"
	// ReasonIdleCull: the session has been idle past its limit; it is
	// drained (reason Idle), then suspended or deleted.
	ReasonIdleCull = "IdleCull"
	// ReasonIdleCullWithdrawn: activity during an idle drain (a turn, a
	// Bump, lull resume) withdrew it; the session keeps running.
	ReasonIdleCullWithdrawn = "IdleCullWithdrawn"
	// ReasonLifetime: the pod has reached the template's maxLifetime; it
	// is drained (reason Lifetime) and replaced.
	ReasonLifetime = "Lifetime"
	// ReasonRuntimeNotReporting: the current pod has been ready for
	// lifecycle.FirstReportGrace and its runtime has no report of its own
	// (Active condition); the session is never culled.
	ReasonRuntimeNotReporting = "RuntimeNotReporting"
	ReasonDraining            = "Draining"
	ReasonDrained             = "Drained"

	// Reasons of a session lull cannot move on its own (see Blocked).
	ReasonTemplateNotFound = "TemplateNotFound"
	ReasonRenderFailed     = "RenderFailed"
	ReasonNameConflict     = "NameConflict"
	// ReasonFilesNotReady: the ConfigMap of the template's spec.files does
	// not exist as lull would create it (the template's FilesReady
	// condition says why); the session keeps its pod and its StatefulSet
	// as they are until it does.
	ReasonFilesNotReady = "FilesNotReady"

	// ReasonPredecessorTerminating: a Session recreated under a name waits
	// until the objects its predecessor left (a StatefulSet, a pod, claims)
	// are deleted, so its StatefulSet never adopts the predecessor's pod.
	ReasonPredecessorTerminating = "PredecessorTerminating"
)

// Reasons of the RolloutPaused and BreakGlass conditions.
const (
	ReasonPausedByHand     = "Paused"
	ReasonFailureThreshold = "FailureThreshold"
	ReasonNotPaused        = "Progressing"
	ReasonBreakGlassActive = "InForce"
	ReasonRevisionMismatch = "RevisionMismatch"
)

// ReasonWaitingForWave: the session is stale and waits for a place in the
// template's wave (UpToDate condition).
const ReasonWaitingForWave = "WaitingForWave"

// Reasons of the Events and the condition of orphan reaping.
const (
	// ReasonOrphanReaped: an object lull made for a session whose Session
	// no longer exists (or was recreated) was deleted.
	ReasonOrphanReaped = "OrphanReaped"
	// ReasonOwnerReferenceRestored: a live session's own object had lost
	// its owner reference; the Session is its controller again.
	ReasonOwnerReferenceRestored = "OwnerReferenceRestored"
	// ReasonPredecessorClaimReused: a claim a predecessor of the same name
	// retained (WhenDeleted=Retain) is mounted by the recreated session.
	ReasonPredecessorClaimReused = "PredecessorClaimReused"
)

// ReasonFilesSwept is the reason of the Normal Event recorded on a
// SessionTemplate when the sweeper deletes one of its files ConfigMaps.
const ReasonFilesSwept = "FilesSwept"
