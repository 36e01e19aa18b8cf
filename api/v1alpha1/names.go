package v1alpha1

// Condition types of a Session.
const (
	// ConditionReady: the session's pod is running and ready.
	ConditionReady = "Ready"
	// ConditionUpToDate: the pod runs the StatefulSet's update revision.
	ConditionUpToDate = "UpToDate"
	// ConditionDraining: a drain request is outstanding.
	ConditionDraining = "Draining"
	// ConditionActive: the runtime has turns in flight.
	ConditionActive = "Active"
)

// Condition type of a SessionTemplate.
const (
	// ConditionRolledOut: every running session of the template runs the
	// update revision.
	ConditionRolledOut = "RolledOut"
	// ConditionRolloutPaused: the template starts no new moves: by hand
	// (spec.updatePolicy.paused, reason Paused) or by the brake (reason
	// FailureThreshold: sessions failed on the update revision).
	ConditionRolloutPaused = "RolloutPaused"
	// ConditionBreakGlass: spec.breakGlass is in force (True, reason
	// InForce) or names a revision that is not the template's (False,
	// reason RevisionMismatch).
	ConditionBreakGlass = "BreakGlass"
	// ConditionImageAllowed: the runtime image is in RuntimeCatalog
	// "default" for the template's namespace (True, reason InCatalog), or
	// there is no catalog (True, reason NoCatalog), or it is not (False,
	// reason ImageNotAllowed: the rollout admits no session, and no new
	// pod is created from the image). See docs/catalog.md.
	ConditionImageAllowed = "ImageAllowed"
	// ConditionFilesReady: the ConfigMap of the template's current
	// spec.files exists with exactly those bytes (True, reason
	// Created or Present), or cannot be made (False, reason
	// FilesRefused, FilesConflict or FilesInvalid). Sessions move to a
	// revision with files only once it is True. Absent when the template
	// has no spec.files.
	ConditionFilesReady = "FilesReady"
)

// Reasons of the ImageAllowed condition; ReasonImageNotAllowed is also a
// Session's Ready and UpToDate reason while its pod would run an image the
// catalog refuses.
const (
	// ReasonInCatalog: the catalog lists the image for the namespace.
	ReasonInCatalog = "InCatalog"
	// ReasonNoCatalog: there is no RuntimeCatalog "default"; every image
	// is allowed.
	ReasonNoCatalog = "NoCatalog"
	// ReasonImageNotAllowed: the catalog does not list the image for the
	// namespace.
	ReasonImageNotAllowed = "ImageNotAllowed"
)

// Reasons of a SessionTemplate's FilesReady condition.
const (
	// ReasonFilesCreated: the template controller created the ConfigMap.
	ReasonFilesCreated = "Created"
	// ReasonFilesPresent: the ConfigMap was already there, lull's and
	// byte-identical (created earlier, or by another writer of the same
	// content).
	ReasonFilesPresent = "Present"
	// ReasonFilesRefused: the API server refused the create (a
	// ResourceQuota's count/configmaps or configmaps, an admission policy
	// or webhook, an object too large). It is tried again with backoff,
	// so freeing the quota is enough.
	ReasonFilesRefused = "FilesRefused"
	// ReasonFilesConflict: a ConfigMap of that name exists that is not
	// lull's (no lull.dev/files label, not immutable, other bytes); lull
	// never adopts it. Delete or rename it.
	ReasonFilesConflict = "FilesConflict"
	// ReasonFilesInvalid: spec.files fails a check only the controller
	// makes (the exact total in bytes); fix spec.files.
	ReasonFilesInvalid = "FilesInvalid"
)

// Annotations and labels lull reads or writes.
const (
	// AnnotationForceUpdate on a Session overrides the update policy: "true"
	// replaces a stale pod without waiting for a drain (for runtimes that
	// cannot drain); a drain request ID replaces the pod for that request
	// only.
	AnnotationForceUpdate = "lull.dev/force-update"

	// AnnotationForceUpdateReason, optional, is recorded in the Event when
	// a force takes effect.
	AnnotationForceUpdateReason = "lull.dev/force-update-reason"

	// AnnotationResumeRollout on a SessionTemplate names a revision whose
	// rollout the brake must not pause again (`lull rollout resume`): an
	// operator has judged its failures acceptable.
	AnnotationResumeRollout = "lull.dev/resume-rollout"

	// AnnotationKeepAlive on a Session names an Idle drain request its
	// user wants withdrawn (`lull resume` on a session being culled): the
	// controller withdraws that request, unless its replacement is already
	// committed, and restarts the idle clock. It counts as activity once
	// per request ID.
	AnnotationKeepAlive = "lull.dev/keep-alive"

	// AnnotationIdleSuspended on a Session names the Idle drain request
	// whose cull suspended it. The controller sets it in the patch that
	// sets spec.suspend, so a session resumed before its committed pod was
	// scaled away is not suspended again for the same request: the pod is
	// replaced, and the session runs on.
	AnnotationIdleSuspended = "lull.dev/idle-suspended"

	// LabelSession is set on every object lull creates for a session,
	// pods included; its value is the session name.
	LabelSession = "lull.dev/session"

	// LabelSessionUID is set on every object lull creates for a session
	// except its pods (the pod template is left alone: a change there would
	// give every StatefulSet a new update revision and drain every
	// session); its value is the Session's UID. It tells a live session's
	// own object that has lost its owner reference (restored) from a
	// predecessor's of the same name (reaped).
	LabelSessionUID = "lull.dev/session-uid"

	// LabelTemplate is set on a session's objects; its value is the template
	// name.
	LabelTemplate = "lull.dev/template"

	// LabelTemplateRevision on a session pod names the revision of the
	// template's runtime it was created from (SessionTemplate
	// status.revision). StatefulSet revisions are per session; this one is
	// shared by every session of the template.
	LabelTemplateRevision = "lull.dev/template-revision"

	// LabelFiles marks a ConfigMap of a template's files (spec.files) as
	// lull's; its value is the files' content address, the suffix of the
	// ConfigMap's name.
	LabelFiles = "lull.dev/files"

	// AnnotationFilesReferencedAt on a files ConfigMap is the time (RFC
	// 3339) a session reconciler last pointed a StatefulSet at it. Writing
	// it changes the ConfigMap's resourceVersion, so the files sweeper,
	// whose deletes carry a resourceVersion precondition and which waits a
	// grace period after every change it sees, never deletes a ConfigMap
	// a StatefulSet is about to name (docs/runtime-files.md, "Sweeper").
	AnnotationFilesReferencedAt = "lull.dev/referenced-at"
)

// FilesVolume is the volume of a session pod that holds the template's
// files (spec.files), mounted at spec.files.mountPath in the runtime
// container.
const FilesVolume = "lull-files"

// RuntimeContainerName is the name of the runtime container in a session
// pod. Whether a pod has failed or has ever started is judged from this
// container and the pod phase only: a failing sidecar never excuses deleting
// a busy runtime.
const RuntimeContainerName = "runtime"

// Environment variables lull sets in the runtime container.
const (
	EnvSessionName      = "LULL_SESSION_NAME"
	EnvSessionNamespace = "LULL_SESSION_NAMESPACE"
	EnvPodName          = "LULL_POD_NAME"
	EnvPodUID           = "LULL_POD_UID"

	// EnvAgentSocket, set only when the template injects the agent
	// sidecar, is the path of the agent's unix socket in the runtime
	// container (AgentSocketPath).
	EnvAgentSocket = "LULL_AGENT_SOCKET"
)

// The injected agent sidecar (SessionTemplate spec.agent): a native
// sidecar, an init container with restartPolicy Always, that holds the
// session's ServiceAccount token and speaks the drain protocol for a
// runtime that only speaks HTTP to a unix socket.
const (
	// AgentContainerName is the sidecar's name; no container of the
	// template may use it.
	AgentContainerName = "lull-agent"

	// AgentSocketVolume is the emptyDir shared by the sidecar and the
	// runtime container, mounted at AgentSocketDir in both.
	AgentSocketVolume = "lull-agent-socket"
	AgentSocketDir    = "/run/lull"
	AgentSocketPath   = AgentSocketDir + "/agent.sock"

	// AgentStateVolume is the emptyDir only the sidecar mounts, at
	// AgentStateDir: the agent's turn table survives a sidecar restart, and
	// the runtime container cannot rewrite it.
	AgentStateVolume = "lull-agent-state"
	AgentStateDir    = "/var/lib/lull-agent"
	AgentStateFile   = AgentStateDir + "/turns.json"

	// AgentTokenVolume is the projected ServiceAccount token, mounted only
	// in the sidecar at the in-cluster path client-go reads
	// (AgentTokenDir); the pod sets automountServiceAccountToken false, so
	// the runtime container has no token.
	AgentTokenVolume = "lull-agent-token"
	AgentTokenDir    = "/var/run/secrets/kubernetes.io/serviceaccount"
)

// RuntimeIdentityName is the name of the ServiceAccount, Role and
// RoleBinding that hold a session's runtime identity.
func RuntimeIdentityName(session string) string { return "lull-runtime-" + session }
