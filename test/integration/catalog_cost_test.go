package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/catalog"
)

// largeCatalog is a catalog as large as the CRD and etcd allow in the
// shape that costs the admission policy most: every entry names the same
// repository, so none is passed over on the repository alone, and every
// list is long. Only the last entry applies to ns and lists tag v1.
func largeCatalog(ns string, scoped bool) lullv1.RuntimeCatalogSpec {
	var spec lullv1.RuntimeCatalogSpec
	tags := make([]string, 0, 256)
	for i := range 255 {
		tags = append(tags, fmt.Sprintf("t%03d", i))
	}
	others := make([]string, 0, 256)
	for i := range 256 {
		others = append(others, fmt.Sprintf("team-%03d", i))
	}
	for range 255 {
		e := lullv1.CatalogImage{Repository: "registry.example.com/rt", Tags: tags}
		if scoped {
			e.Namespaces = others
		}
		spec.Images = append(spec.Images, e)
	}
	last := lullv1.CatalogImage{Repository: "registry.example.com/rt", Tags: append(append([]string{}, tags...), "v1")}
	if scoped {
		last.Namespaces = append(append([]string{}, others[:255]...), ns)
	}
	spec.Images = append(spec.Images, last)
	return spec
}

// TestRuntimeCatalogAdmissionAgreesOnALargeCatalog: the policy's CEL runs
// under the API server's cost limits, and an evaluation over budget is an
// error (which failurePolicy Ignore lets through), not a judgement. A
// catalog the CRD and etcd
// accept must still be judged as package catalog (and `lull catalog
// check`) judges it: its listed image admitted, its unlisted one refused
// by the catalog's rule, not by a cost error.
func TestRuntimeCatalogAdmissionAgreesOnALargeCatalog(t *testing.T) {
	ns := newNamespace(t, "catalog-large")
	for _, scoped := range []bool{false, true} {
		t.Run(fmt.Sprintf("scoped=%v", scoped), func(t *testing.T) {
			spec := largeCatalog(ns, scoped)
			if b, _ := json.Marshal(spec); len(b) > 1400*1024 {
				t.Fatalf("catalog is %d bytes: too large for etcd; shrink the test", len(b))
			}
			setCatalog(t, spec)
			c := &lullv1.RuntimeCatalog{Spec: spec}
			c.Name = lullv1.RuntimeCatalogName
			eventually(t, 30*time.Second, "admission refuses an unlisted repository once the catalog exists", func(ctx context.Context) error {
				if err := admitted(ctx, ns, "registry.example.com/other:v1"); err == nil {
					return errUnexpectedSuccess
				}
				return nil
			})
			for _, image := range []string{"registry.example.com/rt:v1", "registry.example.com/rt:v2"} {
				ok, why := catalog.Allowed(c, ns, image)
				err := admitted(t.Context(), ns, image)
				switch {
				case ok && err != nil:
					t.Errorf("%s: package catalog allows it (%s); admission refuses it: %v", image, why, err)
				case !ok && err == nil:
					t.Errorf("%s: package catalog refuses it (%s); admission allows it", image, why)
				case !ok:
					wantRefusedByCatalog(t, image, err, ns, image)
				}
			}
		})
	}
}

// TestRuntimeCatalogWithoutSpecRefusesByTheCatalogRule: a catalog written
// as `{metadata: {name: default}}` (kubectl apply of a file without spec)
// lists no images, so it allows nothing, as package catalog says; the
// refusal must be the catalog's own message (naming the field, the image
// and `lull catalog`), not a CEL evaluation error.
func TestRuntimeCatalogWithoutSpecRefusesByTheCatalogRule(t *testing.T) {
	ctx := t.Context()
	ns := newNamespace(t, "catalog-nospec")
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(lullv1.GroupVersion.String())
	u.SetKind("RuntimeCatalog")
	u.SetName(lullv1.RuntimeCatalogName)
	if err := admin.Create(ctx, u); err != nil {
		t.Fatalf("create RuntimeCatalog without spec: %v", err)
	}
	t.Cleanup(func() { deleteCatalog(t) })
	cat := &lullv1.RuntimeCatalog{}
	if err := admin.Get(ctx, client.ObjectKey{Name: lullv1.RuntimeCatalogName}, cat); err != nil {
		t.Fatal(err)
	}
	const image = "registry.example.com/rt:v1"
	if ok, why := catalog.Allowed(cat, ns, image); ok {
		t.Fatalf("package catalog allows %s under a catalog without spec: %s", image, why)
	}
	var err error
	eventually(t, 30*time.Second, "admission refuses once the catalog exists", func(ctx context.Context) error {
		if err = admitted(ctx, ns, image); err == nil {
			return errUnexpectedSuccess
		}
		return nil
	})
	wantRefusedByCatalog(t, "a template under a catalog without spec", err, ns, image)
}
