package integration

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/catalog"
	"lull.dev/lull/internal/catalog/catalogtest"
	"lull.dev/lull/internal/cli"
)

// The RuntimeCatalog is a cluster-wide singleton, and the admission policy
// applies it to every template: the catalog tests do not run in parallel
// (Go runs them before every parallel test starts), and each leaves no
// catalog behind, waiting until admission has seen it go.

// catalogTemplate is an unsaved template in ns whose runtime container,
// second after a sidecar the catalog does not list, runs image.
func catalogTemplate(ns, name, image string) *lullv1.SessionTemplate {
	t := newTemplate(ns, name, image)
	t.Spec.Template.Spec.Containers = append([]corev1.Container{{Name: "proxy", Image: "unlisted.example.com/proxy:v1"}}, t.Spec.Template.Spec.Containers...)
	return t
}

// admitted asks the API server, with a dry-run create, whether a template
// in ns running image passes admission; it returns the refusal.
func admitted(ctx context.Context, ns, image string) error {
	return admin.Create(ctx, catalogTemplate(ns, "probe", image), client.DryRunAll)
}

// ensureNamespace creates the namespace name unless it exists.
func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	if err := admin.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// setCatalog creates or replaces RuntimeCatalog default with spec, and
// removes it when the test ends, waiting until admission allows every
// image again.
func setCatalog(t *testing.T, spec lullv1.RuntimeCatalogSpec) {
	t.Helper()
	ctx := t.Context()
	cur := &lullv1.RuntimeCatalog{}
	err := admin.Get(ctx, client.ObjectKey{Name: lullv1.RuntimeCatalogName}, cur)
	switch {
	case apierrors.IsNotFound(err):
		cur = &lullv1.RuntimeCatalog{ObjectMeta: metav1.ObjectMeta{Name: lullv1.RuntimeCatalogName}, Spec: spec}
		if err := admin.Create(ctx, cur); err != nil {
			t.Fatalf("create RuntimeCatalog: %v", err)
		}
		t.Cleanup(func() { deleteCatalog(t) })
	case err != nil:
		t.Fatal(err)
	default:
		cur.Spec = spec
		if err := admin.Update(ctx, cur); err != nil {
			t.Fatalf("update RuntimeCatalog: %v", err)
		}
	}
}

func deleteCatalog(t *testing.T) {
	ctx := context.Background()
	err := admin.Delete(ctx, &lullv1.RuntimeCatalog{ObjectMeta: metav1.ObjectMeta{Name: lullv1.RuntimeCatalogName}})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete RuntimeCatalog: %v", err)
		return
	}
	if err := poll(ctx, 30*time.Second, func(ctx context.Context) error {
		return admitted(ctx, "default", "anything.example.com/after-the-catalog:v1")
	}); err != nil {
		t.Errorf("admission still refuses after the catalog was deleted: %v", err)
	}
}

// wantRefusedByCatalog fails the test unless err is admission's refusal of
// image in ns, naming the field, the image, the namespace and the catalog.
func wantRefusedByCatalog(t *testing.T, what string, err error, ns, image string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: allowed, want refused", what)
		return
	}
	if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
		t.Errorf("%s: %v (reason %s), want the admission policy's refusal", what, err, apierrors.ReasonForError(err))
	}
	for _, part := range []string{"spec.template.spec.containers[1].image", image, "namespace " + ns, `RuntimeCatalog "default"`, "lull catalog"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("%s: refusal %q does not name %q", what, err, part)
		}
	}
}

// TestRuntimeCatalogAdmission: without a catalog any image is allowed; with
// one, the API server refuses a template whose runtime image it does not
// list, with a message naming the field and the catalog, on every row of
// the shared table exactly as package catalog judges it (and `lull
// catalog check` says); an edit applies at once; an update that keeps an
// image no longer listed is allowed. The API server reads the catalog, a
// custom resource, as the policy's parameter with no RBAC granted.
func TestRuntimeCatalogAdmission(t *testing.T) {
	ctx := t.Context()
	ns := newNamespace(t, "catalog")
	ensureNamespace(t, catalogtest.NamespaceA)
	ensureNamespace(t, catalogtest.NamespaceB)

	if err := admitted(ctx, ns, "anything.example.com/whatever:latest"); err != nil {
		t.Fatalf("no catalog: template refused: %v", err)
	}
	var out bytes.Buffer
	if err := cli.WriteCatalog(ctx, &out, admin); err != nil || !strings.Contains(out.String(), "every image is allowed") {
		t.Errorf("lull catalog without a catalog: %q, %v", out.String(), err)
	}

	setCatalog(t, catalogtest.Catalog().Spec)
	eventually(t, 30*time.Second, "admission refuses an unlisted image once the catalog exists", func(ctx context.Context) error {
		if err := admitted(ctx, ns, "registry.example.com/other:v1"); err == nil {
			return errUnexpectedSuccess
		}
		return nil
	})

	c := catalogtest.Catalog()
	for _, tc := range catalogtest.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			err := admitted(ctx, tc.Namespace, tc.Image)
			goOK, why := catalog.Allowed(c, tc.Namespace, tc.Image)
			if goOK != tc.Allowed {
				t.Errorf("package catalog says %v (%s), the table %v", goOK, why, tc.Allowed)
			}
			if tc.Allowed {
				if err != nil {
					t.Errorf("%s in %s: refused, want allowed: %v", tc.Image, tc.Namespace, err)
				}
			} else {
				wantRefusedByCatalog(t, tc.Image, err, tc.Namespace, tc.Image)
			}
			var out bytes.Buffer
			cliOK, err := cli.CheckImage(ctx, &out, admin, tc.Namespace, tc.Image)
			if err != nil || cliOK != tc.Allowed {
				t.Errorf("lull catalog check %s -n %s: %v, %v (%s), want %v", tc.Image, tc.Namespace, cliOK, err, out.String(), tc.Allowed)
			}
		})
	}

	// A template admitted while its image was listed.
	kept := catalogTemplate(ns, "kept", "registry.example.com/agent-runtime:v2")
	if err := admin.Create(ctx, kept); err != nil {
		t.Fatalf("create template with a listed image: %v", err)
	}
	// The catalog drops v2 and adds v3: both apply at once.
	spec := catalogtest.Catalog().Spec
	spec.Images[0].Tags = []string{"v1", "v3"}
	setCatalog(t, spec)
	eventually(t, 30*time.Second, "a tag added to the catalog is accepted", func(ctx context.Context) error {
		return admitted(ctx, ns, "registry.example.com/agent-runtime:v3")
	})
	eventually(t, 30*time.Second, "a tag removed from the catalog is refused", func(ctx context.Context) error {
		if err := admitted(ctx, ns, "registry.example.com/agent-runtime:v2"); err == nil {
			return errUnexpectedSuccess
		}
		return nil
	})
	wantRefusedByCatalog(t, "a new template with the removed tag", admitted(ctx, ns, "registry.example.com/agent-runtime:v2"), ns, "registry.example.com/agent-runtime:v2")

	// The kept template can still be edited otherwise (paused), but not
	// moved to another unlisted image.
	if err := admin.Patch(ctx, kept, mergePatch(`{"spec":{"updatePolicy":{"paused":true}}}`)); err != nil {
		t.Errorf("pause a template whose image left the catalog: %v", err)
	}
	kept.Spec.Template.Spec.Containers[1].Image = "registry.example.com/agent-runtime:v9"
	wantRefusedByCatalog(t, "update to an unlisted image", admin.Update(ctx, kept), ns, "registry.example.com/agent-runtime:v9")
	if err := admin.Get(ctx, client.ObjectKeyFromObject(kept), kept); err != nil {
		t.Fatal(err)
	}
	kept.Spec.Template.Spec.Containers[1].Image = "registry.example.com/agent-runtime:v3"
	if err := admin.Update(ctx, kept); err != nil {
		t.Errorf("update to a listed image: %v", err)
	}
}

// TestRuntimeCatalogValidation: the CRD refuses a catalog that could not
// mean what it says, naming the field.
func TestRuntimeCatalogValidation(t *testing.T) {
	ctx := t.Context()
	good := lullv1.CatalogImage{Repository: "registry.example.com/rt", Tags: []string{"v1"}}
	for _, tc := range []struct {
		name  string
		cat   *lullv1.RuntimeCatalog
		field []string
	}{
		{"another name", &lullv1.RuntimeCatalog{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}, Spec: lullv1.RuntimeCatalogSpec{Images: []lullv1.CatalogImage{good}}},
			[]string{"metadata.name must be default"}},
		{"repository with a tag", catalogWith(lullv1.CatalogImage{Repository: "registry.example.com/rt:v1", Tags: []string{"v1"}}),
			[]string{"spec.images[0].repository", "no tag or digest"}},
		{"repository with a digest", catalogWith(lullv1.CatalogImage{Repository: "registry.example.com/rt@" + catalogtest.ListedDigest, Tags: []string{"v1"}}),
			[]string{"spec.images[0].repository", "no tag or digest"}},
		{"neither tags nor digests", catalogWith(lullv1.CatalogImage{Repository: "registry.example.com/rt"}),
			[]string{"spec.images[0]", "at least one tag or digest"}},
		{"digest not sha256", catalogWith(lullv1.CatalogImage{Repository: "registry.example.com/rt", Digests: []string{"sha256:XYZ"}}),
			[]string{"spec.images[0].digests[0]"}},
		{"tag with a colon", catalogWith(lullv1.CatalogImage{Repository: "registry.example.com/rt", Tags: []string{"v1:x"}}),
			[]string{"spec.images[0].tags[0]"}},
	} {
		err := admin.Create(ctx, tc.cat, client.DryRunAll)
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s: %v, want Invalid", tc.name, err)
			continue
		}
		for _, f := range tc.field {
			if !strings.Contains(err.Error(), f) {
				t.Errorf("%s: %q does not name %q", tc.name, err, f)
			}
		}
	}
	// A registry's port is not a tag.
	if err := admin.Create(ctx, catalogWith(lullv1.CatalogImage{Repository: "registry.example.com:5000/rt", Tags: []string{"v1"}}), client.DryRunAll); err != nil {
		t.Errorf("repository with a registry port: %v", err)
	}
}

func catalogWith(images ...lullv1.CatalogImage) *lullv1.RuntimeCatalog {
	return &lullv1.RuntimeCatalog{ObjectMeta: metav1.ObjectMeta{Name: lullv1.RuntimeCatalogName}, Spec: lullv1.RuntimeCatalogSpec{Images: images}}
}
