// Package catalog judges a runtime image against the RuntimeCatalog: the
// same rules the ValidatingAdmissionPolicy lull-runtime-catalog applies on
// the API server (config/admission/runtime-catalog-policy.yaml), so what
// `lull catalog` shows, what the controller holds back and what admission
// accepts are one set. The test table in cases_test.go is run against
// both. Read fetches the catalog that every controller and the CLI judge
// against.
package catalog

import (
	"fmt"
	"slices"
	"strings"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Image is an image reference split as the admission policy splits it.
type Image struct {
	// Repository is everything before the tag and digest, as written.
	Repository string
	// Tag is what follows the last ':' when that ':' comes after the last
	// '/' (a ':' before it is a registry's port); "" when there is none.
	Tag string
	// Digest is what follows the first '@' ("sha256:..."); "" when there
	// is none.
	Digest string
}

// Parse splits an image reference into repository, tag and digest, with no
// normalization ("nginx" stays "nginx"): "reg:5000/rt:v1@sha256:ab" is
// {reg:5000/rt, v1, sha256:ab}. It never fails; a reference without tag and
// digest has both empty.
func Parse(image string) Image {
	var im Image
	named := image
	if at := strings.Index(image, "@"); at >= 0 {
		named, im.Digest = image[:at], image[at+1:]
	}
	im.Repository = named
	if colon := strings.LastIndex(named, ":"); colon >= 0 && colon > strings.LastIndex(named, "/") {
		im.Repository, im.Tag = named[:colon], named[colon+1:]
	}
	return im
}

// Allowed reports whether a template in namespace may run image as its
// runtime, and why in words (naming the catalog). With no catalog (c nil)
// every image is allowed. With one, an entry must name the image's
// repository and apply to the namespace (its namespaces empty, or holding
// it), and list the image's digest, or, for an image without digest, its
// tag: the digest is what runs, so a listed tag does not admit an unlisted
// digest. An image with neither tag nor digest is never in a catalog.
func Allowed(c *lullv1.RuntimeCatalog, namespace, image string) (bool, string) {
	if c == nil {
		return true, fmt.Sprintf("no RuntimeCatalog %q: every image is allowed", lullv1.RuntimeCatalogName)
	}
	im := Parse(image)
	inRepo, inNamespace := false, false
	for _, e := range c.Spec.Images {
		if e.Repository != im.Repository {
			continue
		}
		inRepo = true
		if len(e.Namespaces) > 0 && !slices.Contains(e.Namespaces, namespace) {
			continue
		}
		inNamespace = true
		switch {
		case im.Digest != "" && slices.Contains(e.Digests, im.Digest):
			return true, fmt.Sprintf("digest %s of %s is in RuntimeCatalog %q", im.Digest, im.Repository, c.Name)
		case im.Digest == "" && im.Tag != "" && slices.Contains(e.Tags, im.Tag):
			return true, fmt.Sprintf("tag %s of %s is in RuntimeCatalog %q", im.Tag, im.Repository, c.Name)
		}
	}
	where := fmt.Sprintf("RuntimeCatalog %q", c.Name)
	switch {
	case !inRepo:
		return false, fmt.Sprintf("repository %s is not in %s", im.Repository, where)
	case !inNamespace:
		return false, fmt.Sprintf("repository %s is in %s, but not for namespace %s", im.Repository, where, namespace)
	case im.Digest != "":
		return false, fmt.Sprintf("digest %s of %s is not in %s for namespace %s (an image with a digest is judged by its digest)", im.Digest, im.Repository, where, namespace)
	case im.Tag == "":
		return false, fmt.Sprintf("image %s names no tag or digest, and %s lists only exact tags and digests", image, where)
	}
	return false, fmt.Sprintf("tag %s of %s is not in %s for namespace %s", im.Tag, im.Repository, where, namespace)
}
