package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// UpdateStrategy says how a session whose pod runs a stale revision is moved
// to the update revision.
//
// +kubebuilder:validation:Enum=Drain
type UpdateStrategy string

const (
	// UpdateStrategyDrain asks the runtime to finish its accepted turns and
	// refuse new ones, and replaces the pod only after the runtime reports
	// Drained for that pod. The default.
	UpdateStrategyDrain UpdateStrategy = "Drain"
)

// RuntimeSpec is the container a session's pod runs. Every session of a
// template runs the same RuntimeSpec; changing it creates a new revision.
type RuntimeSpec struct {
	// Image is the container image of the runtime.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.matches('[[:space:]]')",message="spec.runtime.image must not contain whitespace"
	Image string `json:"image"`

	// Command overrides the image's entrypoint.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Command []string `json:"command,omitempty"`

	// Args are the arguments to the entrypoint.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	Args []string `json:"args,omitempty"`

	// Env is added to the runtime container's environment. Names starting
	// with LULL_ are reserved for what lull tells the runtime.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	// +kubebuilder:validation:XValidation:rule="self.all(e, !e.name.startsWith('LULL_'))",message="spec.runtime.env: names starting with LULL_ are reserved for lull; rename the variable"
	Env []corev1.EnvVar `json:"env,omitempty"`

	// Resources are the runtime container's compute requests and limits.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// Ports the runtime listens on; the session's headless Service exposes
	// them. With more than one port, each needs a name (a Service requires
	// it).
	// +optional
	// +listType=map
	// +listMapKey=containerPort
	// +listMapKey=protocol
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule="self.size() <= 1 || self.all(p, has(p.name) && p.name != '')",message="spec.runtime.ports: with more than one port, every port needs a name (the session's Service requires it)"
	Ports []corev1.ContainerPort `json:"ports,omitempty"`
}

// UpdatePolicy says how sessions move to a new revision of their template.
type UpdatePolicy struct {
	// Strategy is how a running stale session is updated. Drain (the
	// default) replaces each pod only after its runtime has drained.
	// +optional
	// +kubebuilder:default=Drain
	Strategy UpdateStrategy `json:"strategy,omitempty"`
}

// SessionTemplateSpec is the runtime shared by the sessions that reference
// the template and the policy for rolling it out.
type SessionTemplateSpec struct {
	// Runtime is the container every session of this template runs.
	Runtime RuntimeSpec `json:"runtime"`

	// UpdatePolicy says how running sessions move to a new revision.
	// +optional
	// +kubebuilder:default={strategy: Drain}
	UpdatePolicy UpdatePolicy `json:"updatePolicy,omitempty"`
}

// SessionTemplateStatus is what the controller observed of the template's
// rollout.
type SessionTemplateStatus struct {
	// ObservedGeneration is the template generation the counts describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Revision identifies the template's current runtime: the first 10 hex
	// characters of the SHA-256 of spec.runtime. Session pods carry it in
	// the lull.dev/template-revision label.
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

	// Suspended is the number of suspended sessions.
	// +optional
	Suspended int32 `json:"suspended"`

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

// SessionTemplate is the runtime many sessions share: the unit that is
// updated and rolled out.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=stpl,categories=lull
// +kubebuilder:printcolumn:name="Revision",type=string,JSONPath=`.status.revision`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.runtime.image`
// +kubebuilder:printcolumn:name="Strategy",type=string,JSONPath=`.spec.updatePolicy.strategy`
// +kubebuilder:printcolumn:name="Sessions",type=integer,JSONPath=`.status.sessions`
// +kubebuilder:printcolumn:name="Current",type=integer,JSONPath=`.status.current`
// +kubebuilder:printcolumn:name="Stale",type=integer,JSONPath=`.status.stale`
// +kubebuilder:printcolumn:name="Draining",type=integer,JSONPath=`.status.draining`
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
