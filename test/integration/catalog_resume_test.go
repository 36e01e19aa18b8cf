package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// TestCatalogKeepsSuspendedSessionDownOnARefusedImage: docs/catalog.md,
// "a suspended session whose last image is not allowed either does not
// resume". The session's StatefulSet was written with the template's
// image while the catalog listed it; the session was suspended (scaled to
// zero); the catalog then dropped the image. Resuming must not scale the
// StatefulSet up (a new pod on a refused image): the session says
// ImageNotAllowed and stays at zero replicas.
func TestCatalogKeepsSuspendedSessionDownOnARefusedImage(t *testing.T) {
	ns := startManager(t)
	ctx := t.Context()
	n := runs.Add(1)
	const repo = "example.com/catalog-resume"
	setCatalog(t, lullv1.RuntimeCatalogSpec{Images: []lullv1.CatalogImage{{Repository: repo, Tags: []string{"v1"}}}})
	tpl := newTemplate(ns, fmt.Sprintf("catresume%d", n), repo+":v1")
	eventually(t, 30*time.Second, "template with a listed image admitted", func(ctx context.Context) error {
		return admin.Create(ctx, tpl)
	})
	s := newSession(ns, fmt.Sprintf("catresume%d", n), tpl.Name)
	if err := admin.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: ns, Name: s.Name}
	replicas := func(ctx context.Context) (int32, error) {
		sts := &appsv1.StatefulSet{}
		if err := admin.Get(ctx, key, sts); err != nil {
			return -1, err
		}
		return ptr.Deref(sts.Spec.Replicas, 1), nil
	}
	eventually(t, 20*time.Second, "StatefulSet created with one replica", func(ctx context.Context) error {
		if r, err := replicas(ctx); err != nil || r != 1 {
			return fmt.Errorf("replicas %d, %v", r, err)
		}
		return nil
	})

	// Suspended: there is no pod (no kubelet here), so it scales to zero
	// at once.
	if err := admin.Patch(ctx, sessionRef(ns, s.Name), mergePatch(`{"spec":{"suspend":true}}`)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "StatefulSet scaled to zero", func(ctx context.Context) error {
		if r, err := replicas(ctx); err != nil || r != 0 {
			return fmt.Errorf("replicas %d, %v", r, err)
		}
		return nil
	})

	// The catalog drops v1; the controller sees it (the template's
	// ImageAllowed turns False).
	setCatalog(t, lullv1.RuntimeCatalogSpec{Images: []lullv1.CatalogImage{{Repository: repo, Tags: []string{"v2"}}}})
	eventually(t, 20*time.Second, "template ImageAllowed=False", func(ctx context.Context) error {
		got := &lullv1.SessionTemplate{}
		if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: tpl.Name}, got); err != nil {
			return err
		}
		if !meta.IsStatusConditionFalse(got.Status.Conditions, lullv1.ConditionImageAllowed) {
			return fmt.Errorf("conditions %+v", got.Status.Conditions)
		}
		return nil
	})

	if err := admin.Patch(ctx, sessionRef(ns, s.Name), mergePatch(`{"spec":{"suspend":false}}`)); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, ns, s.Name, "the resumed session says ImageNotAllowed", func(st lullv1.SessionStatus) bool {
		for _, c := range st.Conditions {
			if c.Reason == lullv1.ReasonImageNotAllowed {
				return true
			}
		}
		return false
	})
	// The reconcile that wrote that reason made no StatefulSet write, and
	// every later one decides the same.
	if r, err := replicas(ctx); err != nil || r != 0 {
		t.Errorf("StatefulSet replicas %d (%v) after the resume, want 0: a pod would start on %s:v1, which the catalog no longer lists", r, err, repo)
	}
}
