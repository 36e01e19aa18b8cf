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

	// LabelSession is set on every object lull creates for a session,
	// pods included; its value is the session name.
	LabelSession = "lull.dev/session"

	// LabelTemplate is set on a session's objects; its value is the template
	// name.
	LabelTemplate = "lull.dev/template"

	// LabelTemplateRevision on a session pod names the revision of the
	// template's runtime it was created from (SessionTemplate
	// status.revision). StatefulSet revisions are per session; this one is
	// shared by every session of the template.
	LabelTemplateRevision = "lull.dev/template-revision"
)

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
)

// RuntimeIdentityName is the name of the ServiceAccount, Role and
// RoleBinding that hold a session's runtime identity.
func RuntimeIdentityName(session string) string { return "lull-runtime-" + session }
