package v1alpha1

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

	// AnnotationCreateRetriedAt on a session's StatefulSet is the time (RFC
	// 3339) lull last asked the StatefulSet controller to try again to
	// create a pod (or claim) the API server refused (reason
	// PodCreateRefused or PodQuotaExceeded). Writing it is an update of the
	// StatefulSet, which the StatefulSet controller syncs at once instead
	// of after its own backoff (up to about 17 minutes).
	AnnotationCreateRetriedAt = "lull.dev/create-retried-at"

	// AnnotationSpecWritten on a session's StatefulSet records lull's own
	// last write of its spec, as "<generation>/<spec-hash>/<uid>": the
	// metadata.generation that write produced, the lull.dev/spec-hash it
	// carried and the UID of the StatefulSet it was made on (for example
	// "7/3f2a9c0d1e2b4a5c/0b6e1c2a-7d3f-4c1e-9a8b-5f4e3d2c1b0a"). It is
	// written in the same request as the spec, naming the lowest
	// generation the write can produce, and raised from the response: the
	// API server moves a StatefulSet's generation on every change of its
	// spec and on no other, so the StatefulSet of that UID at that
	// generation and hash holds lull's spec as admission left it, and any
	// other was written by someone else, whichever controller process
	// looks. Set only by the controller; editing it makes lull restore the
	// StatefulSet as it renders it.
	AnnotationSpecWritten = "lull.dev/spec-written"

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

	// LabelDrained on a session pod names the drain request (its ID) the
	// pod was drained and committed for while its node is disrupted: the
	// PodDisruptionBudget lull keeps for the session selects only pods
	// without it, so once it is set the Eviction API lets the node's
	// drain evict exactly this pod (the hand-off; docs/protocol.md). Set
	// only by the controller, with the pod's UID as a precondition.
	LabelDrained = "lull.dev/drained"

	// AnnotationDrainedAt on a session pod is when (RFC 3339) lull set
	// LabelDrained on it: a pod nobody evicts within
	// rollout.NodeDrainHandoff of it is deleted by lull itself.
	AnnotationDrainedAt = "lull.dev/drained-at"

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

// FieldManagerController is the field manager of every write lull's
// controllers make (Session and SessionTemplate status, a session's
// objects, the files ConfigMaps): the manager that managedFields name for
// them, and that a runtime's report is told apart from.
const FieldManagerController = "lull-controller"

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
