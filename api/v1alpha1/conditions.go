package v1alpha1

// The conditions lull writes and their reasons, one block per condition
// type as Cluster API groups them (api/core/v1beta2/*_types.go): the type,
// then the reasons it is set with, each saying when. A reason is one
// CamelCase word, read by the controller, the CLI (lull status), the docs
// and users' alerts alike: its value never changes. A reason set on more
// than one condition is declared in the block of the condition it is
// mostly read on, and named in the others'. The reasons of Events that no
// condition carries are in the last blocks.
//
// A Session's UpToDate reasons are the reasons of the rollout's steps
// (rollout.Action.Reason), so they also name the Events of those steps and
// the status writes counted by lull_session_status_writes_total.

// A Session's Ready condition: its pod is running and ready.
const (
	// ConditionReady is True when the session's pod is running and ready.
	ConditionReady = "Ready"

	// ReasonPodReady (True): the pod is running and ready.
	ReasonPodReady = "PodReady"
	// ReasonPodNotReady (False): the pod has not failed but is not yet (or
	// no longer) running and ready; the message gives its phase.
	ReasonPodNotReady = "PodNotReady"
	// ReasonNodeLost (False): the node the pod is bound to can no longer
	// answer for it: its Ready condition is False or Unknown (a crashed
	// machine, a partition, a spot reclaim), or the Node is deleted. The
	// message names the pod, the node, its state and since when, and the
	// manual step: lull never force-deletes the pod, for a StatefulSet
	// keeps at most one pod of a name only as long as nobody does while
	// the machine may still run it (docs/operations.md, "A node lost").
	ReasonNodeLost = "NodeLost"
	// ReasonClaimPending (False): the session's pod waits for a
	// PersistentVolumeClaim.
	ReasonClaimPending = "ClaimPending"

	// Reasons of a session the controller cannot render or start (False,
	// and UpToDate Unknown with the same reason), each with a Warning
	// Event when it is new, tried again with backoff (5 s, doubling to 5
	// minutes); the running pod is left alone.

	// ReasonTemplateNotFound: the session's SessionTemplate does not exist.
	ReasonTemplateNotFound = "TemplateNotFound"
	// ReasonRenderFailed: the session's objects cannot be rendered from
	// its template, or the API server refuses them (a quota, a webhook, a
	// template that passes the CRD's validation but not the StatefulSet's).
	ReasonRenderFailed = "RenderFailed"
	// ReasonNameConflict: a name the session's objects need is taken by an
	// object the session does not own.
	ReasonNameConflict = "NameConflict"
	// ReasonPodCreateRefused: the StatefulSet controller cannot create the
	// session's pod or claim: the API server refuses it (Pod Security
	// admission, a LimitRange, a policy webhook). The condition quotes the
	// refusal, as the StatefulSet controller's FailedCreate Event has it.
	ReasonPodCreateRefused = "PodCreateRefused"
	// ReasonPodQuotaExceeded: as ReasonPodCreateRefused, refused by a
	// ResourceQuota of the namespace that has no room for it. That is the
	// namespace's capacity, not the revision's fault: the rollout brake
	// does not count it. A pod that alone asks more than the quota allows
	// in all is ReasonPodCreateRefused: only the template can fix it.
	ReasonPodQuotaExceeded = "PodQuotaExceeded"
	// ReasonAdmissionUnavailable: as ReasonPodCreateRefused, but the API
	// server could not call an admission webhook it must call to admit the
	// pod ("failed calling webhook": its service down or unreachable). The
	// webhook's outage, not the revision's fault: the rollout brake does
	// not count it.
	ReasonAdmissionUnavailable = "AdmissionUnavailable"
	// ReasonQuotaExceeded: a ResourceQuota of the namespace refuses one of
	// the objects lull creates for the session (its ServiceAccount, Role,
	// RoleBinding, Service or StatefulSet). As ReasonPodQuotaExceeded, the
	// namespace's capacity: the rollout brake does not count it.
	ReasonQuotaExceeded = "QuotaExceeded"
	// ReasonPredecessorTerminating: a Session recreated under a name waits
	// until the objects its predecessor left (a StatefulSet, a pod, claims)
	// are deleted, so its StatefulSet never adopts the predecessor's pod.
	ReasonPredecessorTerminating = "PredecessorTerminating"
)

// A Session's UpToDate condition: its pod runs the StatefulSet's update
// revision. Its reasons are the rollout's (internal/rollout); a session
// blocked shows the Ready reasons above with UpToDate Unknown, and one
// whose image the catalog refuses shows ReasonImageNotAllowed.
const (
	// ConditionUpToDate is True when the pod runs the StatefulSet's update
	// revision.
	ConditionUpToDate = "UpToDate"

	// ReasonUpToDate (True): the pod runs the update revision.
	ReasonUpToDate = "UpToDate"

	// ReasonDraining (False): a drain request for the stale pod is
	// outstanding and its runtime has not yet reported Drained; the
	// request and the wait for its answer read the same.
	ReasonDraining = "Draining"
	// ReasonDrained (False): the runtime reported Drained for the
	// outstanding request; the pod's replacement is committed.
	ReasonDrained = "Drained"
	// ReasonPodFailed (False): the stale pod is terminal or its runtime
	// container cannot start; it is replaced without a drain. Also the
	// Ready reason (False) of a session whose pod has failed.
	ReasonPodFailed = "PodFailed"
	// ReasonNeverStarted (False): the stale pod's runtime container has
	// never started and its runtime has never reported; it is replaced
	// without a drain.
	ReasonNeverStarted = "NeverStarted"
	// ReasonReplacementBackoff (False): a stale pod that cannot serve waits
	// out the backoff of the session's earlier failed replacements.
	ReasonReplacementBackoff = "ReplacementBackoff"
	// ReasonForced (False): lull.dev/force-update replaces the stale pod
	// without a drain.
	ReasonForced = "Forced"
	// ReasonReplaced (False): the Replace strategy replaced a stale pod
	// without a drain.
	ReasonReplaced = "Replaced"
	// ReasonDrainDeadlineExceeded (False): the drain request's deadline
	// passed and onDrainTimeout is Replace; the pod is replaced.
	ReasonDrainDeadlineExceeded = "DrainDeadlineExceeded"
	// ReasonDrainOverdue (False): the deadline passed and onDrainTimeout is
	// Wait.
	ReasonDrainOverdue = "DrainOverdue"
	// ReasonPodStuckTerminating (False): the pod has outlived its deletion
	// timestamp by rollout.StuckTerminatingAfter; the message names the
	// manual fix.
	ReasonPodStuckTerminating = "PodStuckTerminating"
	// ReasonUpdatePending (False): under the Passive strategy, the pod runs
	// a stale revision and waits to be replaced for another reason.
	ReasonUpdatePending = "UpdatePending"
	// ReasonWaitingForWave (False): the session is stale and waits for a
	// place in the template's wave.
	ReasonWaitingForWave = "WaitingForWave"

	// ReasonIdleCull: the session has been idle past its limit; it is
	// drained (reason Idle), then suspended or deleted. False on a stale
	// pod, Unknown while the session has no pod or no update revision.
	ReasonIdleCull = "IdleCull"
	// ReasonIdleCullWithdrawn: activity during an idle drain (a turn, a
	// Bump, lull resume) withdrew it; the session keeps running. False on
	// a stale pod, Unknown while the session has no pod or no update
	// revision; also a Normal Event.
	ReasonIdleCullWithdrawn = "IdleCullWithdrawn"
	// ReasonLifetime: the pod has reached the template's maxLifetime; it
	// is drained (reason Lifetime) and replaced. False on a stale pod,
	// Unknown while the session has no pod or no update revision.
	ReasonLifetime = "Lifetime"
	// ReasonNodeDrain: the pod's node is being disrupted (cordoned,
	// tainted by a drain, an autoscaler or a node upgrade, or the pod
	// marked DisruptionTarget) and the template's nodeDrainPolicy is
	// Drain: the pod is drained (reason NodeDrain) and replaced on another
	// node. False on a stale pod, Unknown while the session has no pod or
	// no update revision; also the Warning Event of a node drain whose
	// deadline replaced the pod, and the Normal Event of one withdrawn.
	ReasonNodeDrain = "NodeDrain"

	// ReasonStatefulSetPending (Unknown): the session's StatefulSet is not
	// created yet.
	ReasonStatefulSetPending = "StatefulSetPending"
	// ReasonRevisionUnknown (Unknown): the StatefulSet controller has not
	// yet observed the StatefulSet's generation or published its update
	// revision.
	ReasonRevisionUnknown = "RevisionUnknown"
	// ReasonPodPending (Unknown): the StatefulSet controller has not yet
	// created the pod. Also the Ready reason (False) of a session with no
	// pod yet.
	ReasonPodPending = "PodPending"
	// ReasonPodTerminating (Unknown): the session's pod is being deleted.
	ReasonPodTerminating = "PodTerminating"
	// ReasonSuspending (Unknown): the session is being suspended and its
	// pod is not gone yet.
	ReasonSuspending = "Suspending"
	// ReasonSuspended (Unknown): the session is suspended. Also its Ready
	// reason (False), and the Event recorded when it is suspended.
	ReasonSuspended = "Suspended"
	// ReasonFilesNotReady (Unknown): the ConfigMap of the template's
	// spec.files does not exist as lull would create it (the template's
	// FilesReady condition says why); the session keeps its pod and its
	// StatefulSet as they are until it does. Ready stays what the pod says.
	ReasonFilesNotReady = "FilesNotReady"
)

// A Session's Draining condition: a drain request is outstanding. While it
// is True its reason is the request's (DrainReason: Update, Idle,
// Lifetime, Manual, NodeDrain).
const (
	// ConditionDraining is True while a drain request is outstanding.
	ConditionDraining = "Draining"

	// ReasonNoDrainRequest (False): no drain request is outstanding.
	ReasonNoDrainRequest = "NoDrainRequest"
)

// A Session's Active condition: what its runtime's report says of turns.
const (
	// ConditionActive is True when the runtime has turns in flight.
	ConditionActive = "Active"

	// ReasonTurnsInFlight (True): the runtime of the current pod reports
	// active turns. lull_sessions counts the session as Active.
	ReasonTurnsInFlight = "TurnsInFlight"
	// ReasonIdle (False): the runtime of the current pod reports no turn
	// in flight (whether or not it can be culled for idleness).
	// lull_sessions counts the session as Idle.
	ReasonIdle = "Idle"
	// ReasonNoReport (Unknown): the runtime of the current pod has not
	// reported yet.
	ReasonNoReport = "NoReport"
	// ReasonRuntimeNotReporting (Unknown): the current pod has been ready
	// for lifecycle.FirstReportGrace and its runtime has no report of its
	// own; the session is never culled. Also a Warning Event.
	ReasonRuntimeNotReporting = "RuntimeNotReporting"
)

// A Session's BudgetsOverlap condition, absent unless another
// PodDisruptionBudget (not lull's) also selects the session's pod under
// nodeDrainPolicy Drain: the Eviction API refuses to evict a pod covered
// by more than one budget, so every eviction of it fails (kubectl drain
// stops on it, node upgrades wait then force), whatever lull's budget and
// drain say. Its first appearance is also a Warning Event.
const (
	// ConditionBudgetsOverlap is True while another budget also selects
	// the session's pod.
	ConditionBudgetsOverlap = "BudgetsOverlap"

	// ReasonOverlappingBudgets (True): the message names lull's budget and
	// the others that select the pod, and what to change.
	ReasonOverlappingBudgets = "OverlappingBudgets"
)

// A Session's PinnedToNode condition, absent unless the session's pod is
// on a node being drained (nodeDrainPolicy Drain) and one of its claims is
// bound to a PersistentVolume whose node affinity matches that node and no
// other schedulable one (a local volume, a zonal disk whose zone has no
// other node): a replacement elsewhere could never start, so lull sends no
// drain request for the node's drain, and the session's budget keeps
// refusing evictions, so the running turn stays protected. Nothing is
// deleted for the node's drain while it holds, whatever drainTimeout says:
// the node's drain waits, and the operator decides. Its first appearance
// is also a Warning Event.
const (
	// ConditionPinnedToNode is True while a claim holds the session's pod
	// on a node being drained.
	ConditionPinnedToNode = "PinnedToNode"

	// ReasonVolumeNodeAffinity (True): the message names the claim, its
	// PersistentVolume and the node, and what to do.
	ReasonVolumeNodeAffinity = "VolumeNodeAffinity"
)

// A SessionTemplate's RolledOut condition.
const (
	// ConditionRolledOut is True when every running session of the
	// template runs the update revision.
	ConditionRolledOut = "RolledOut"

	// ReasonAllCurrent (True): every session not suspended is current.
	ReasonAllCurrent = "AllCurrent"
	// ReasonRollingOut (False): some sessions are stale; the message names
	// those blocked (rollout.Blocked) while the others move.
	ReasonRollingOut = "RollingOut"
	// ReasonBlocked (False): every stale session is blocked: nothing moves
	// until someone acts on the sessions the message names.
	ReasonBlocked = "Blocked"
)

// A SessionTemplate's RolloutPaused condition: the template starts no new
// moves. Its reason is also that of the Warning Event recorded when it
// turns True.
const (
	// ConditionRolloutPaused is True when the template starts no new
	// moves: by hand (spec.updatePolicy.paused, reason Paused) or by the
	// brake (reason FailureThreshold: sessions failed on the update
	// revision).
	ConditionRolloutPaused = "RolloutPaused"

	// ReasonPaused (True): spec.updatePolicy.paused is true.
	ReasonPaused = "Paused"
	// ReasonFailureThreshold (True): failureThreshold sessions failed on
	// the update revision (the brake).
	ReasonFailureThreshold = "FailureThreshold"
	// ReasonProgressing (False): sessions move as the update policy allows.
	ReasonProgressing = "Progressing"
)

// A SessionTemplate's BreakGlass condition, absent without
// spec.breakGlass.
const (
	// ConditionBreakGlass is True while spec.breakGlass is in force, False
	// when it names a revision that is not the template's.
	ConditionBreakGlass = "BreakGlass"

	// ReasonInForce (True): spec.breakGlass names the template's revision:
	// every stale session drains for at most its grace, then is replaced.
	ReasonInForce = "InForce"
	// ReasonRevisionMismatch (False): spec.breakGlass names a revision
	// that is not the template's; it applies to nothing.
	ReasonRevisionMismatch = "RevisionMismatch"
)

// A SessionTemplate's ImageAllowed condition. See docs/catalog.md.
const (
	// ConditionImageAllowed is True when the runtime image is in
	// RuntimeCatalog "default" for the template's namespace, or there is
	// no catalog; False when it is not: the rollout admits no session, and
	// no new pod is created from the image.
	ConditionImageAllowed = "ImageAllowed"

	// ReasonInCatalog (True): the catalog lists the image for the
	// namespace.
	ReasonInCatalog = "InCatalog"
	// ReasonNoCatalog (True): there is no RuntimeCatalog "default"; every
	// image is allowed.
	ReasonNoCatalog = "NoCatalog"
	// ReasonImageNotAllowed (False): the catalog does not list the image
	// for the namespace; also the Warning Event recorded when the
	// condition turns False. It is also a Session's Ready (False) and
	// UpToDate (Unknown while blocked; False while its StatefulSet is held
	// at what it runs) reason while its pod would run that image.
	ReasonImageNotAllowed = "ImageNotAllowed"
)

// A SessionTemplate's FilesReady condition, absent when the template has no
// spec.files. Sessions move to a revision with files only once it is
// True. A False reason is also that of the Warning Event recorded when the
// condition turns False or changes its False reason.
const (
	// ConditionFilesReady is True when the ConfigMap of the template's
	// current spec.files exists with exactly those bytes.
	ConditionFilesReady = "FilesReady"

	// ReasonCreated (True): the template controller created the ConfigMap.
	ReasonCreated = "Created"
	// ReasonPresent (True): the ConfigMap was already there, lull's and
	// byte-identical (created earlier, or by another writer of the same
	// content).
	ReasonPresent = "Present"
	// ReasonFilesRefused (False): the API server refused the create (a
	// ResourceQuota's count/configmaps or configmaps, an admission policy
	// or webhook, an object too large). It is tried again with backoff, so
	// freeing the quota is enough.
	ReasonFilesRefused = "FilesRefused"
	// ReasonFilesConflict (False): a ConfigMap of that name exists that is
	// not lull's (no lull.dev/files label, not immutable, other bytes);
	// lull never adopts it. Delete or rename it.
	ReasonFilesConflict = "FilesConflict"
	// ReasonFilesInvalid (False): spec.files fails a check only the
	// controller makes (the exact total in bytes); fix spec.files.
	ReasonFilesInvalid = "FilesInvalid"
)

// Reasons of the Events of a Session's rollout that no condition carries.
const (
	// ReasonDrainRequested (Normal): the controller wrote a drain request
	// for an update or a suspension. As a step's reason it is counted by
	// lull_session_status_writes_total; the UpToDate condition then says
	// Draining (or Suspending).
	ReasonDrainRequested = "DrainRequested"
	// ReasonUpdated (Normal): the session's UpToDate condition turned True
	// on a new pod: it runs the update revision.
	ReasonUpdated = "Updated"
	// ReasonResumed (Normal): the session left the Suspended phase; the
	// Event of its suspension has ReasonSuspended.
	ReasonResumed = "Resumed"
	// ReasonIdleSuspend (Normal): an idle cull suspended the session.
	ReasonIdleSuspend = "IdleSuspend"
	// ReasonIdleDelete (Normal): an idle cull deleted the session.
	ReasonIdleDelete = "IdleDelete"
)

// Reasons of the Events of a SessionTemplate's rollout that no condition
// carries.
const (
	// ReasonBreakGlass (Warning): the template's BreakGlass condition came
	// into force (turned True, reason InForce).
	ReasonBreakGlass = "BreakGlass"
)

// Reasons of the Events of the reaper, the drift check and the files
// sweeper.
const (
	// ReasonOrphanReaped (Normal): an object lull made for a session whose
	// Session no longer exists (or was recreated) was deleted.
	ReasonOrphanReaped = "OrphanReaped"
	// ReasonOwnerReferenceRestored (Normal): a live session's own object
	// had lost its owner reference; the Session is its controller again.
	ReasonOwnerReferenceRestored = "OwnerReferenceRestored"
	// ReasonPredecessorClaimReused (Normal): a claim a predecessor of the
	// same name retained (WhenDeleted=Retain) is mounted by the recreated
	// session.
	ReasonPredecessorClaimReused = "PredecessorClaimReused"
	// ReasonDriftCorrected (Warning, on a Session): lull restored a field
	// it renders on one of the session's objects (a StatefulSet's replicas,
	// labels, annotations, update strategy or pod template; a Service's
	// selector or ports; a Role's rules) that another writer changed.
	ReasonDriftCorrected = "DriftCorrected"
	// ReasonFilesSwept (Normal, on a SessionTemplate): the sweeper deleted
	// one of the template's files ConfigMaps.
	ReasonFilesSwept = "FilesSwept"
)
