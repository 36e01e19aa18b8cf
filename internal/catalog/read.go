package catalog

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// +kubebuilder:rbac:groups=lull.dev,resources=runtimecatalogs,verbs=get;list;watch

// Read returns RuntimeCatalog "default" from c (the manager's cache, or
// the API server for the CLI), or nil when there is none: then every image
// is allowed (Allowed takes nil as no catalog). Any other error of the read
// is returned wrapped, naming the catalog.
func Read(ctx context.Context, c client.Reader) (*lullv1.RuntimeCatalog, error) {
	cat := &lullv1.RuntimeCatalog{}
	err := c.Get(ctx, client.ObjectKey{Name: lullv1.RuntimeCatalogName}, cat)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read RuntimeCatalog %q: %w", lullv1.RuntimeCatalogName, err)
	}
	return cat, nil
}
