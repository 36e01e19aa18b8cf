package v1alpha1

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// UpdateStrategy says how a session whose pod runs a stale revision is moved
// to the update revision.
//
// +kubebuilder:validation:Enum=Drain;Passive;Replace
type UpdateStrategy string

const (
	// UpdateStrategyDrain asks the runtime to finish its accepted turns and
	// refuse new ones, and replaces the pod only after the runtime reports
	// Drained for that pod (or, with drainTimeout and onDrainTimeout
	// Replace, once the deadline passed). The default.
	UpdateStrategyDrain UpdateStrategy = "Drain"
	// UpdateStrategyPassive never touches a running stale session: it
	// shows UpToDate=False with reason UpdatePending, its runtime learns
	// that an update is pending, and it moves to the update revision when
	// its pod is next replaced for another reason (a suspend and resume, a
	// failure, the lifecycle). New sessions start on the update revision.
	UpdateStrategyPassive UpdateStrategy = "Passive"
	// UpdateStrategyReplace replaces a stale pod at once, turns or not,
	// for runtimes that cannot drain: the controller writes a drain
	// request whose deadline is now (the runtime sees it), then deletes the
	// pod with its UID as precondition and records a Warning Event.
	UpdateStrategyReplace UpdateStrategy = "Replace"
)

// DrainTimeoutAction is what happens to a pod whose runtime has not
// drained by the drain request's deadline.
//
// +kubebuilder:validation:Enum=Wait;Replace
type DrainTimeoutAction string

const (
	// DrainTimeoutWait keeps waiting for the drain; the session shows the
	// deadline as passed (UpToDate reason DrainOverdue) and a Warning
	// Event is recorded once. The default.
	DrainTimeoutWait DrainTimeoutAction = "Wait"
	// DrainTimeoutReplace deletes the pod once the deadline has passed,
	// whatever turns it holds, and records a Warning Event.
	DrainTimeoutReplace DrainTimeoutAction = "Replace"
)

// UpdatePolicy says how sessions move to a new revision of their template.
//
// +kubebuilder:validation:XValidation:rule="!has(self.maxUnavailable) || self.strategy == 'Passive' || (type(self.maxUnavailable) == int ? self.maxUnavailable > 0 : self.maxUnavailable != '0%')",message="spec.updatePolicy.maxUnavailable: 0 would let no session move; use at least 1 (or 1%)"
type UpdatePolicy struct {
	// Strategy is how a running stale session is updated. Drain (the
	// default) replaces each pod only after its runtime has drained.
	// +optional
	// +kubebuilder:default=Drain
	Strategy UpdateStrategy `json:"strategy,omitempty"`

	// DrainTimeout bounds how long the runtime has to drain for an update,
	// as a duration ("15m", "1h30m"); unset means no deadline. The deadline
	// (request time + DrainTimeout) is written into the drain request, so
	// the runtime can tell its user when the session restarts. A change
	// applies to drains requested after it.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="spec.updatePolicy.drainTimeout must be at least 1s; leave it unset for no deadline"
	DrainTimeout *metav1.Duration `json:"drainTimeout,omitempty"`

	// OnDrainTimeout is what happens once the deadline passes: Wait (the
	// default) or Replace.
	// +optional
	// +kubebuilder:default=Wait
	OnDrainTimeout DrainTimeoutAction `json:"onDrainTimeout,omitempty"`

	// MaxUnavailable bounds how many sessions of the template are moved at
	// once (a drain requested for the update, the pod replaced, the new
	// pod not yet Ready): a count, or a percentage of the template's
	// running sessions rounded down, at least 1, as the StatefulSet and
	// Deployment fields of that name. Default 25%. Stale sessions go in a
	// fixed order: idle ones first, then those Ready the longest, then by
	// name. Replacements of failed pods and suspensions do not wait for it.
	// +optional
	// +kubebuilder:default="25%"
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="spec.updatePolicy.maxUnavailable: a count (0 or more) or a percentage from 0% to 100%"
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`

	// Paused, when true, starts no new moves: sessions already moving
	// finish, the others keep their revision.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// FailureThreshold is the brake: once this many sessions (a count, or
	// a percentage of the running sessions rounded up, at least 1) run the
	// update revision and fail to become Ready (their runtime cannot start,
	// or not Ready within progressDeadlineSeconds), the rollout pauses by
	// itself (condition RolloutPaused, reason FailureThreshold) until the
	// template changes or `lull rollout resume`. Default 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^(100|[1-9][0-9]?)%$')",message="spec.updatePolicy.failureThreshold: a count of 1 or more, or a percentage from 1% to 100%"
	FailureThreshold *intstr.IntOrString `json:"failureThreshold,omitempty"`

	// ProgressDeadlineSeconds is how long a session's pod of the update
	// revision may take to become Ready before it counts as failed for the
	// brake. Default 600, as a Deployment's.
	// +optional
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=1
	ProgressDeadlineSeconds *int32 `json:"progressDeadlineSeconds,omitempty"`
}

// NodeDrainStrategy says whether lull stands between the disruption of a
// node (kubectl drain, a managed node upgrade, an autoscaler's scale-down)
// and the session pods on it.
//
// +kubebuilder:validation:Enum=Drain;Ignore
type NodeDrainStrategy string

const (
	// NodeDrainStrategyDrain guards every session pod with a
	// PodDisruptionBudget lull keeps (the Eviction API answers 429 until
	// the pod's runtime has drained), and drains the sessions of a node
	// being disrupted (reason NodeDrain). The default.
	NodeDrainStrategyDrain NodeDrainStrategy = "Drain"
	// NodeDrainStrategyIgnore leaves node disruptions to Kubernetes: no
	// budget, no node drains; an eviction ends the pod whatever turns it
	// holds.
	NodeDrainStrategyIgnore NodeDrainStrategy = "Ignore"
)

// NodeDrainWave says whether a node drain waits for a place in the
// template's rollout wave.
//
// +kubebuilder:validation:Enum=Node;Template
type NodeDrainWave string

const (
	// NodeDrainWaveNode drains every session of the disrupted node at
	// once, without a place in the wave: the node is going away, and the
	// drain of the node waits on the slowest of them. The default.
	NodeDrainWaveNode NodeDrainWave = "Node"
	// NodeDrainWaveTemplate gives a node drain a place under
	// updatePolicy.maxUnavailable, as an update drain: the template's
	// sessions move no faster than its rollouts do, and the node's drain
	// takes longer.
	NodeDrainWaveTemplate NodeDrainWave = "Template"
)

// DefaultNodeDrainTimeout is nodeDrainPolicy.drainTimeout when the policy
// does not say: it must end before the managed node upgrades stop waiting
// on budgets (EKS managed node groups: 15 minutes, then the update fails
// or forces; AKS: drainTimeoutInMinutes, default 30; GKE: respects budgets
// for up to 1 hour), so the runtime drains, or is replaced at lull's
// deadline, before the provider evicts anyway.
const DefaultNodeDrainTimeout = 10 * time.Minute

// NodeDrainPolicy says what lull does when a session pod's node is
// disrupted: cordoned (spec.unschedulable), tainted by a drain
// (node.kubernetes.io/unschedulable, karpenter.sh/disrupted,
// ToBeDeletedByClusterAutoscaler), or the pod marked DisruptionTarget.
type NodeDrainPolicy struct {
	// Strategy is Drain (the default: lull guards evictions of session
	// pods and drains them when their node is disrupted) or Ignore (left
	// to Kubernetes: no budget, no node drains).
	// +optional
	// +kubebuilder:default=Drain
	Strategy NodeDrainStrategy `json:"strategy,omitempty"`

	// DrainTimeout bounds how long the runtime has to drain for a node
	// drain, as a duration; default 10m. The deadline (request time +
	// DrainTimeout) is written into the drain request, as for an update,
	// so the runtime can tell its user. 10m ends before the providers'
	// managed node upgrades stop waiting on budgets (EKS managed node
	// groups: 15 minutes; AKS: drainTimeoutInMinutes, default 30; GKE: up
	// to 1 hour), after which they evict anyway.
	// +optional
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="spec.nodeDrainPolicy.drainTimeout must be at least 1s"
	// +kubebuilder:validation:XValidation:rule="self.matches('^-?([0-9]+([.][0-9]*)?(ns|us|µs|ms|s|m|h))+$')",message="spec.nodeDrainPolicy.drainTimeout must be a duration such as 90s, 10m or 1h (units ns, us, ms, s, m, h; no d)"
	DrainTimeout *metav1.Duration `json:"drainTimeout,omitempty"`

	// OnDrainTimeout is what happens once the deadline passes: Replace
	// (the default for node drains: the node is going away, and waiting
	// past the provider's limit ends in a forced eviction anyway) or Wait
	// (the node's drain waits on the session, and the session says so).
	// +optional
	// +kubebuilder:default=Replace
	OnDrainTimeout DrainTimeoutAction `json:"onDrainTimeout,omitempty"`

	// Wave is Node (the default: every session of the disrupted node is
	// drained at once, without a place in the rollout wave) or Template
	// (a node drain takes a place under updatePolicy.maxUnavailable, as an
	// update drain).
	// +optional
	// +kubebuilder:default=Node
	Wave NodeDrainWave `json:"wave,omitempty"`
}

// BreakGlass is a security-critical update forced for one revision: every
// stale session is drained with a short deadline (Grace), then replaced,
// within the wave, whatever the strategy. It applies only while Revision is
// the template's revision; a later revision goes back to the policy.
type BreakGlass struct {
	// Revision is the template revision (status.revision) it applies to.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Revision string `json:"revision"`
	// Reason says why, for the Events and the status.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason"`
	// Grace is the drain deadline each session gets (duration, default
	// 5m); its runtime is told when it will be replaced.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="spec.breakGlass.grace must not be negative"
	Grace metav1.Duration `json:"grace,omitempty"`
	// RequestedBy is who asked, as the client that set it says (`lull
	// rollout force` writes the user the API server authenticated it as).
	// +optional
	// +kubebuilder:validation:MaxLength=256
	RequestedBy string `json:"requestedBy,omitempty"`
	// RequestedAt is when.
	// +optional
	RequestedAt *metav1.Time `json:"requestedAt,omitempty"`
}

// DefaultAgentImage is the image of the injected agent sidecar when
// spec.agent.image is not given: lull's lull-agent image (`make images`),
// whose entrypoint is the sidecar.
const DefaultAgentImage = "ghcr.io/lull-dev/lull-agent:v0.1.0"

// AgentSpec injects `lull agent` into every session pod as a Kubernetes
// native sidecar (an init container with restartPolicy Always, Kubernetes
// 1.29 and later): it speaks the drain protocol for a runtime that only
// speaks HTTP to a unix socket, and it alone holds the session's
// ServiceAccount token. See docs/templates.md.
type AgentSpec struct {
	// Image is the image of the sidecar; its entrypoint must be the drain
	// sidecar (lull-agent, or `lull agent`), to which lull passes its
	// flags as arguments. Changing it is a new revision: every session's
	// pod is replaced, between its turns.
	// +optional
	// +kubebuilder:default="ghcr.io/lull-dev/lull-agent:v0.1.0"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.matches('[[:space:]]')",message="spec.agent.image must not contain whitespace"
	Image string `json:"image,omitempty"`

	// Resources of the sidecar container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// ReportRefresh is the longest the agent leaves a change of the
	// runtime's turn count or activity unwritten in its report (`lull
	// agent --report-refresh`): such changes are written at most once per
	// refresh, nothing is written while nothing changes, and a drain state
	// is written at once. It is the granularity of activity the idle
	// policy sees: a session is culled no sooner than this after its idle
	// limit. Omitted: 60s. Shorter shows activity sooner and costs up to
	// one status write per busy session per refresh.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="spec.agent.reportRefresh must be between 1s and 1h"
	// +kubebuilder:validation:XValidation:rule="self.matches('^-?([0-9]+([.][0-9]*)?(ns|us|µs|ms|s|m|h))+$')",message="spec.agent.reportRefresh must be a duration such as 90s, 30m or 24h (units ns, us, ms, s, m, h; no d)"
	ReportRefresh *metav1.Duration `json:"reportRefresh,omitempty"`
}

// FilesMaxBytes bounds the total size of a template's files (the sum of
// their contents, names excluded): a ConfigMap holds at most 1 MiB, and the
// rest is headroom for its keys and metadata.
const FilesMaxBytes = 900 * 1024

// Files are runtime files delivered into the runtime container as one
// directory, read-only: each item is a file named by its name, directly
// under MountPath.
type Files struct {
	// MountPath is the absolute directory the files appear in, in the
	// runtime container. It must not be / nor under /run/lull (the agent's
	// socket) or /var/run/secrets/kubernetes.io/serviceaccount (the
	// runtime's token), and no other volume of the runtime container may be
	// mounted there.
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/')",message="spec.files.mountPath must be an absolute path, such as /etc/runtime"
	// +kubebuilder:validation:XValidation:rule="!self.contains('/../') && !self.endsWith('/..') && !self.contains('//')",message="spec.files.mountPath must be a clean path: no .. segments and no //"
	// +kubebuilder:validation:XValidation:rule="self != '/run/lull' && !self.startsWith('/run/lull/') && self != '/var/run/secrets/kubernetes.io/serviceaccount' && !self.startsWith('/var/run/secrets/kubernetes.io/serviceaccount/')",message="spec.files.mountPath: /run/lull and /var/run/secrets/kubernetes.io/serviceaccount are lull's (the agent's socket, the runtime's token); choose another directory"
	MountPath string `json:"mountPath"`

	// Items are the files, at most 256, names unique. Their total size is
	// at most 900 KiB (FilesMaxBytes): a ConfigMap holds 1 MiB. The API
	// server counts text in characters (CEL's cost budget does not allow
	// converting every item to bytes) and binary content from its base64
	// length; the controller checks the exact bytes and reports a template over the limit in its sessions'
	// RenderFailed condition.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:XValidation:rule="self.map(i, has(i.content) ? size(i.content) : (has(i.binaryContent) ? size(i.binaryContent) / 4 * 3 : 0)).sum() <= 921600",message="spec.files.items: the files total more than 900 KiB (a ConfigMap holds 1 MiB); mount larger files from an image or a volume of your own"
	Items []FileItem `json:"items"`
}

// FileItem is one file: its name and exactly one of content (UTF-8 text)
// or binaryContent (bytes, base64 in JSON and YAML).
//
// +kubebuilder:validation:XValidation:rule="has(self.content) != has(self.binaryContent)",message="spec.files.items: give exactly one of content (text) or binaryContent (base64)"
type FileItem struct {
	// Name is the file's name in mountPath, a valid ConfigMap key: letters,
	// digits, '-', '_' and '.', not . or .. nor starting with ..
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +kubebuilder:validation:XValidation:rule="self != '.' && !self.startsWith('..')",message="spec.files.items[].name must not be . nor start with .. (ConfigMap key rules); rename the file"
	Name string `json:"name"`

	// Content is the file's text (UTF-8).
	// +optional
	// +kubebuilder:validation:MaxLength=921600
	Content *string `json:"content,omitempty"`

	// BinaryContent is the file's bytes, base64-encoded (standard
	// alphabet, padded) in JSON and YAML. The schema declares it a plain
	// string with a base64 pattern, not format byte: the API server's CEL
	// decodes format byte with the URL alphabet and refuses every value
	// holding + or / (kubernetes/kube-openapi#633).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Format=""
	// +kubebuilder:validation:MaxLength=1228800
	// +kubebuilder:validation:Pattern=`^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$`
	BinaryContent []byte `json:"binaryContent,omitempty"`
}

// WaveEntry is a session admitted to the rollout's wave: it may issue the
// drain request with drain sequence Sequence (see UpdatePolicy
// maxUnavailable).
type WaveEntry struct {
	// Session is the session's name.
	Session string `json:"session"`
	// Sequence is the drain sequence number the admitted request takes.
	Sequence int64 `json:"sequence"`
	// AdmittedAt is when the session was admitted.
	AdmittedAt metav1.Time `json:"admittedAt"`
}

// SessionTemplateSpec is the pod shared by the sessions that reference the
// template and the policy for rolling it out.
//
// +kubebuilder:validation:XValidation:rule="has(self.volumeClaimTemplates) == has(oldSelf.volumeClaimTemplates) && (!has(self.volumeClaimTemplates) || self.volumeClaimTemplates == oldSelf.volumeClaimTemplates)",message="spec.volumeClaimTemplates cannot be changed, as on a StatefulSet: every session keeps the claims it was created with; create a new SessionTemplate for sessions that need other claims"
// +kubebuilder:validation:XValidation:rule="!has(self.agent) || !has(self.template.spec.initContainers) || self.template.spec.initContainers.all(c, c.name != 'lull-agent')",message="spec.template.spec.initContainers: the name lull-agent is the injected agent sidecar's; rename the container"
type SessionTemplateSpec struct {
	// Template is the pod every session of this template runs, as a
	// Deployment's or StatefulSet's spec.template. Exactly one container is
	// the runtime: the one named "runtime". lull adds what it owns: the
	// session's ServiceAccount, the LULL_* environment of the runtime
	// container, its labels, and (with spec.agent) the agent sidecar;
	// everything else passes through untouched. Changing it creates a new
	// revision.
	// +kubebuilder:validation:XValidation:rule="self.spec.containers.exists_one(c, c.name == 'runtime')",message="spec.template.spec.containers: exactly one container must be named runtime: it is the session's runtime, drained between turns"
	// +kubebuilder:validation:XValidation:rule="self.spec.containers.all(c, c.name != 'runtime' || (has(c.image) && c.image != ''))",message="spec.template.spec.containers[runtime].image: the runtime container needs an image"
	// +kubebuilder:validation:XValidation:rule="!has(self.spec.serviceAccountName) || self.spec.serviceAccountName == ''",message="spec.template.spec.serviceAccountName: lull runs every session as its own ServiceAccount (lull-runtime-<session>); remove the field"
	// +kubebuilder:validation:XValidation:rule="!has(self.spec.serviceAccount) || self.spec.serviceAccount == ''",message="spec.template.spec.serviceAccount: lull runs every session as its own ServiceAccount (lull-runtime-<session>); remove the field"
	// +kubebuilder:validation:XValidation:rule="!has(self.spec.automountServiceAccountToken)",message="spec.template.spec.automountServiceAccountToken: lull sets it (true for a runtime that reports itself, false with spec.agent, where only the sidecar holds the token); remove the field"
	// +kubebuilder:validation:XValidation:rule="!has(self.spec.restartPolicy) || self.spec.restartPolicy == 'Always'",message="spec.template.spec.restartPolicy: a session pod runs until lull replaces it; remove the field or set Always"
	// +kubebuilder:validation:XValidation:rule="!has(self.metadata) || !has(self.metadata.labels) || self.metadata.labels.all(k, !k.startsWith('lull.dev/'))",message="spec.template.metadata.labels: keys with the prefix lull.dev/ are lull's (session, template, revision); rename the label"
	// +kubebuilder:validation:XValidation:rule="self.spec.containers.all(c, c.name != 'lull-agent') && (!has(self.spec.initContainers) || self.spec.initContainers.all(c, c.name != 'lull-agent'))",message="spec.template.spec: the container name lull-agent is reserved for the injected agent sidecar; rename the container"
	// +kubebuilder:validation:XValidation:rule="!has(self.spec.volumes) || self.spec.volumes.all(v, !v.name.startsWith('lull-'))",message="spec.template.spec.volumes: names starting with lull- are reserved for the volumes lull adds; rename the volume"
	Template corev1.PodTemplateSpec `json:"template"`

	// VolumeClaimTemplates become the claim templates of every session's
	// StatefulSet: each session gets its own PersistentVolumeClaims,
	// named <claim>-<session>-0, kept across every replacement of its pod.
	// Mount them from the runtime container by the claim template's name.
	// They cannot be changed once set (as on a StatefulSet).
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(c, has(c.metadata) && has(c.metadata.name) && c.metadata.name != '')",message="spec.volumeClaimTemplates: every claim template needs metadata.name (the name its volume is mounted by)"
	VolumeClaimTemplates []corev1.PersistentVolumeClaim `json:"volumeClaimTemplates,omitempty"`

	// PersistentVolumeClaimRetentionPolicy says what happens to a session's
	// claims, as the StatefulSet field of that name: whenDeleted applies
	// when the Session is deleted, whenScaled when it is suspended. The
	// default deletes them with the Session and keeps them while it is
	// suspended.
	// +optional
	// +kubebuilder:default={whenDeleted: Delete, whenScaled: Retain}
	PersistentVolumeClaimRetentionPolicy *appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy `json:"persistentVolumeClaimRetentionPolicy,omitempty"`

	// Files, when set, are delivered read-only into the runtime container
	// as a directory at files.mountPath, through an immutable ConfigMap
	// named by the hash of their content (<template>-files-<hash>; see
	// docs/runtime-files.md). Changing them is a new revision; a running
	// pod keeps the files it booted with.
	// +optional
	Files *Files `json:"files,omitempty"`

	// Agent, when set (`agent: {}` takes the defaults), injects the lull
	// agent as a native sidecar; the runtime container finds its socket in
	// LULL_AGENT_SOCKET and has no ServiceAccount token.
	// +optional
	Agent *AgentSpec `json:"agent,omitempty"`

	// UpdatePolicy says how running sessions move to a new revision.
	// +optional
	// +kubebuilder:default={strategy: Drain}
	UpdatePolicy UpdatePolicy `json:"updatePolicy,omitempty"`

	// NodeDrainPolicy says what lull does when a session pod's node is
	// drained, upgraded or scaled down: by default it keeps a
	// PodDisruptionBudget over each session pod, so evictions wait, and
	// drains the session first (reason NodeDrain). See docs/operations.md,
	// "Upgrading nodes".
	// +optional
	// +kubebuilder:default={strategy: Drain}
	NodeDrainPolicy NodeDrainPolicy `json:"nodeDrainPolicy,omitempty"`

	// BreakGlass forces the move to one revision (`lull rollout force`).
	// +optional
	BreakGlass *BreakGlass `json:"breakGlass,omitempty"`

	// Idle culls idle sessions: drained first, then suspended or deleted.
	// A Session's spec.idle replaces it. Omitted: never.
	// +optional
	Idle *IdlePolicy `json:"idle,omitempty"`

	// MaxLifetime is the oldest a session's pod may get: older, it is
	// drained (reason Lifetime) and replaced on the current revision,
	// within the wave limit (maxUnavailable). The clock restarts with each
	// new pod. Omitted or 0: never.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) == duration('0s') || duration(self) >= duration('1m')",message="spec.maxLifetime must be at least 1m (or 0s for never): a shorter lifetime would restart sessions faster than they start"
	// +kubebuilder:validation:XValidation:rule="self.matches('^-?([0-9]+([.][0-9]*)?(ns|us|µs|ms|s|m|h))+$')",message="spec.maxLifetime must be a duration such as 90s, 30m or 24h (units ns, us, ms, s, m, h; no d)"
	MaxLifetime *metav1.Duration `json:"maxLifetime,omitempty"`
}

// SessionTemplateStatus is what the controller observed of the template's
// rollout.
type SessionTemplateStatus struct {
	// ObservedGeneration is the template generation the counts describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Revision identifies the template's current pod: the first 10 hex
	// characters of the SHA-256 of spec.template, spec.volumeClaimTemplates,
	// spec.agent and (when set) spec.files. Session pods carry it in the
	// lull.dev/template-revision label.
	// +optional
	Revision string `json:"revision,omitempty"`

	// Sessions is the number of sessions that reference this template.
	// +optional
	Sessions int32 `json:"sessions"`

	// Current is the number of sessions whose pod runs the update revision.
	// +optional
	Current int32 `json:"current"`

	// Stale is the number of sessions whose pod runs an older revision.
	// +optional
	Stale int32 `json:"stale"`

	// Draining is the number of sessions with a drain request outstanding.
	// +optional
	Draining int32 `json:"draining"`

	// Waiting is the number of stale sessions waiting for a place in the
	// wave (maxUnavailable).
	// +optional
	Waiting int32 `json:"waiting"`

	// UpdatePending is the number of stale sessions left alone by the
	// Passive strategy.
	// +optional
	UpdatePending int32 `json:"updatePending"`

	// ExpectedCompletion is when the rollout is expected to finish under
	// its policy. Under Drain and Replace: the stale sessions in waves of
	// maxUnavailable, each wave as long as the drains this controller has
	// watched finish (their mean); unset when no drain has been watched
	// yet, and while paused. Under Passive: the latest, over the stale
	// running sessions, of each one's earliest idle cull or lifetime
	// deadline (Session status.lifecycle); unset while any stale session
	// has neither (see WithoutDeadline). Unset when nothing is stale.
	// +optional
	ExpectedCompletion *metav1.Time `json:"expectedCompletion,omitempty"`

	// WithoutDeadline is the number of stale running sessions that, under
	// Passive, have no idle cull or lifetime deadline ahead (busy, or no
	// idle policy and no maxLifetime): they move only when replaced for
	// another reason, so no completion time can be given.
	// +optional
	WithoutDeadline int32 `json:"withoutDeadline,omitempty"`

	// Suspended is the number of suspended sessions.
	// +optional
	Suspended int32 `json:"suspended"`

	// PausedRevision is the revision whose rollout the brake paused; the
	// pause ends when the template's revision changes.
	// +optional
	PausedRevision string `json:"pausedRevision,omitempty"`

	// Failing names the sessions whose pods of the update revision failed
	// to become Ready, at most 20 (see failureThreshold).
	// +optional
	// +kubebuilder:validation:MaxItems=20
	Failing []string `json:"failing,omitempty"`

	// Wave is the sessions admitted to move now (at most maxUnavailable),
	// written by the controller with the template's resourceVersion as a
	// precondition, so no two writers and no stale cache admit more. A
	// session leaves it once its new pod is Ready, or its request is
	// withdrawn.
	// +optional
	// +listType=map
	// +listMapKey=session
	// +kubebuilder:validation:MaxItems=10000
	Wave []WaveEntry `json:"wave,omitempty"`

	// OldestStaleSince is when the longest-waiting stale session was asked
	// to move, or unset when none is stale.
	// +optional
	OldestStaleSince *metav1.Time `json:"oldestStaleSince,omitempty"`

	// Conditions: RolledOut is True when every running session runs the
	// update revision of its StatefulSet.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SessionTemplate is the pod many sessions share: the unit that is
// updated and rolled out.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=stpl,categories=lull
// +kubebuilder:printcolumn:name="Revision",type=string,JSONPath=`.status.revision`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.template.spec.containers[?(@.name=="runtime")].image`
// +kubebuilder:printcolumn:name="Strategy",type=string,JSONPath=`.spec.updatePolicy.strategy`
// +kubebuilder:printcolumn:name="Sessions",type=integer,JSONPath=`.status.sessions`
// +kubebuilder:printcolumn:name="Current",type=integer,JSONPath=`.status.current`
// +kubebuilder:printcolumn:name="Stale",type=integer,JSONPath=`.status.stale`
// +kubebuilder:printcolumn:name="Draining",type=integer,JSONPath=`.status.draining`
// +kubebuilder:printcolumn:name="Paused",type=string,JSONPath=`.status.conditions[?(@.type=="RolloutPaused")].status`
// +kubebuilder:printcolumn:name="Expected",type=string,JSONPath=`.status.expectedCompletion`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="metadata.name must be at most 63 characters: sessions carry it in the lull.dev/template label"
type SessionTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SessionTemplateSpec   `json:"spec"`
	Status SessionTemplateStatus `json:"status,omitempty"`
}

// SessionTemplateList is a list of SessionTemplates.
//
// +kubebuilder:object:root=true
type SessionTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SessionTemplate `json:"items"`
}

func init() {
	SchemeBuilder.Register(&SessionTemplate{}, &SessionTemplateList{})
}

// RuntimeContainer returns the container of spec.template named runtime
// (RuntimeContainerName), or nil when there is none.
func (t *SessionTemplate) RuntimeContainer() *corev1.Container {
	for i := range t.Spec.Template.Spec.Containers {
		if t.Spec.Template.Spec.Containers[i].Name == RuntimeContainerName {
			return &t.Spec.Template.Spec.Containers[i]
		}
	}
	return nil
}
