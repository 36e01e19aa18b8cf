// Package v1alpha1 holds the lull.dev/v1alpha1 API: SessionTemplate, the
// runtime many sessions share and the unit that is rolled out, and Session,
// one interactive session and its drain protocol state.
//
// +kubebuilder:object:generate=true
// +groupName=lull.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "lull.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
