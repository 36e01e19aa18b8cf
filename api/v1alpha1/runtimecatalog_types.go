package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RuntimeCatalogName is the name of the one RuntimeCatalog lull reads: the
// admission policy's binding names it (paramRef) and the controller and
// `lull catalog` read it. Without it every image is allowed.
const RuntimeCatalogName = "default"

// CatalogImage is one entry of the catalog: a repository and the tags and
// digests of it that templates may run, optionally only in some
// namespaces.
//
// +kubebuilder:validation:XValidation:rule="size(self.?tags.orValue([])) + size(self.?digests.orValue([])) > 0",message="list at least one tag or digest of the repository (tags: [\"v1.2.0\"] or digests: [\"sha256:...\"])"
type CatalogImage struct {
	// Repository is the image without tag or digest, as templates write
	// it (no normalization: "nginx" and "docker.io/library/nginx" are
	// different repositories), e.g. "registry.example.com/agent-runtime".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.contains('@') && (!self.contains(':') || self.lastIndexOf(':') < self.lastIndexOf('/'))",message="a repository has no tag or digest (write registry.example.com/agent-runtime, and the tag in tags or the digest in digests)"
	// +kubebuilder:validation:XValidation:rule="!self.matches('[[:space:]]')",message="a repository contains no whitespace"
	Repository string `json:"repository"`

	// Tags are the exact tags allowed (no patterns), e.g. "v1.2.0". An
	// image that names a digest is judged by its digest alone.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`
	Tags []string `json:"tags,omitempty"`

	// Digests are the content digests allowed, "sha256:" and 64 lowercase
	// hex digits.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:Pattern=`^sha256:[a-f0-9]{64}$`
	Digests []string `json:"digests,omitempty"`

	// Namespaces, when given, limit the entry to templates in these
	// namespaces; empty means every namespace.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	Namespaces []string `json:"namespaces,omitempty"`
}

// RuntimeCatalogSpec lists the runtime images templates may run.
type RuntimeCatalogSpec struct {
	// Images are the allowed repositories with their tags and digests. An
	// image is allowed when some entry names its repository, lists its
	// digest (or, for an image without digest, its tag) and applies to the
	// template's namespace. An empty list allows nothing.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	Images []CatalogImage `json:"images,omitempty"`
}

// RuntimeCatalog is the cluster's allow-list of runtime images: the image
// of a SessionTemplate's runtime container must be in it. It is a
// singleton named "default" (RuntimeCatalogName). The API server enforces
// it at admission (the ValidatingAdmissionPolicy lull-runtime-catalog takes
// it as its parameter, so an edit applies at once); a template whose image
// later leaves it shows ImageAllowed=False and is not rolled out further.
// See docs/catalog.md.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=rcat,categories=lull
// +kubebuilder:printcolumn:name="Repositories",type=string,JSONPath=`.spec.images[*].repository`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'default'",message="metadata.name must be default: lull reads one RuntimeCatalog, named default"
type RuntimeCatalog struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec RuntimeCatalogSpec `json:"spec,omitempty"`
}

// RuntimeCatalogList is a list of RuntimeCatalogs.
//
// +kubebuilder:object:root=true
type RuntimeCatalogList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RuntimeCatalog `json:"items"`
}

func init() {
	SchemeBuilder.Register(&RuntimeCatalog{}, &RuntimeCatalogList{})
}
