package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// IdlePolicy says when an idle session is culled. A session is idle only
// while the fresh report of its current pod's runtime says no turn is
// active; it has been idle since its last real activity (a turn begun or
// ended, or the runtime's Bump), or since the controller first saw the pod's
// runtime idle, whichever is later. An omitted or zero limit means never:
// no default is injected. Both limits count from the same moment, so
// deleteAfter must not be shorter than suspendAfter.
//
// +kubebuilder:validation:XValidation:rule="!has(self.suspendAfter) || !has(self.deleteAfter) || duration(self.deleteAfter) == duration('0s') || duration(self.deleteAfter) >= duration(self.suspendAfter)",message="idle.deleteAfter must not be shorter than idle.suspendAfter: both count from when the session became idle; raise deleteAfter, or drop suspendAfter to delete without suspending"
type IdlePolicy struct {
	// SuspendAfter is how long a session may be idle before it is drained
	// (reason Idle) and suspended: its StatefulSet scaled to zero, its
	// workspace claims kept, its spec.suspend set to true.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="idle.suspendAfter must not be negative; omit it or use 0s for never"
	// +kubebuilder:validation:XValidation:rule="self.matches('^-?([0-9]+([.][0-9]*)?(ns|us|µs|ms|s|m|h))+$')",message="idle.suspendAfter must be a duration such as 90s, 30m or 24h (units ns, us, ms, s, m, h; no d)"
	SuspendAfter *metav1.Duration `json:"suspendAfter,omitempty"`

	// DeleteAfter is how long a session may be idle before it is drained
	// and the Session deleted (with UID and resourceVersion preconditions);
	// its claims then follow persistentVolumeClaimRetentionPolicy. A
	// suspended session counts as idle.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="idle.deleteAfter must not be negative; omit it or use 0s for never"
	// +kubebuilder:validation:XValidation:rule="self.matches('^-?([0-9]+([.][0-9]*)?(ns|us|µs|ms|s|m|h))+$')",message="idle.deleteAfter must be a duration such as 90s, 30m or 24h (units ns, us, ms, s, m, h; no d)"
	DeleteAfter *metav1.Duration `json:"deleteAfter,omitempty"`
}

// IdleAction is what an idle cull does to a session.
//
// +kubebuilder:validation:Enum=Suspend;Delete
type IdleAction string

// The idle actions.
const (
	IdleSuspend IdleAction = "Suspend"
	IdleDelete  IdleAction = "Delete"
)

// LifecycleStatus is the session's idle clock and when it is culled or
// restarted if nothing changes: the inputs of its template's convergence
// window under the Passive strategy.
type LifecycleStatus struct {
	// IdleSince is when the session became idle: the later of its
	// runtime's lastActivity (a time in the future counts as the moment
	// the controller first saw it) and the moment the controller first saw
	// the current pod's runtime idle. Unset while a turn is active, and
	// while the runtime is not reporting. A suspended session stays idle.
	// +optional
	IdleSince *metav1.Time `json:"idleSince,omitempty"`

	// IdlePodUID is the pod whose runtime's report IdleSince was judged
	// from; a new pod starts a new idle clock.
	// +optional
	IdlePodUID types.UID `json:"idlePodUID,omitempty"`

	// IdleActivity is the report's lastActivity IdleSince was judged from;
	// while the report says the same, IdleSince holds.
	// +optional
	IdleActivity *metav1.Time `json:"idleActivity,omitempty"`

	// CullAt is when the session is culled if it stays idle.
	// +optional
	CullAt *metav1.Time `json:"cullAt,omitempty"`

	// CullAction is what happens at CullAt: Suspend or Delete.
	// +optional
	CullAction IdleAction `json:"cullAction,omitempty"`

	// LifetimeDeadline is when the current pod reaches the template's
	// maxLifetime and is drained (reason Lifetime) and replaced.
	// +optional
	LifetimeDeadline *metav1.Time `json:"lifetimeDeadline,omitempty"`
}
