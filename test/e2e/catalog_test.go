package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/scenario"
)

const turnrunner = "example.com/lull/turnrunner"

// applyCatalog creates or replaces RuntimeCatalog default listing tags of
// the reference runtime; the first call deletes it again when the test
// ends and waits until admission allows every image (the catalog is
// cluster-wide, and the e2e tests run one at a time).
func applyCatalog(t *testing.T, tags ...string) {
	t.Helper()
	ctx := context.Background()
	spec := lullv1.RuntimeCatalogSpec{Images: []lullv1.CatalogImage{{Repository: turnrunner, Tags: tags}}}
	cat := &lullv1.RuntimeCatalog{}
	err := c.Get(ctx, client.ObjectKey{Name: lullv1.RuntimeCatalogName}, cat)
	switch {
	case apierrors.IsNotFound(err):
		cat = &lullv1.RuntimeCatalog{ObjectMeta: metav1.ObjectMeta{Name: lullv1.RuntimeCatalogName}, Spec: spec}
		if err := c.Create(ctx, cat); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := c.Delete(ctx, cat); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete RuntimeCatalog: %v", err)
			}
			probe := scenario.Template("default", "catalog-probe", "anything.example.com/after-the-catalog:v1")
			eventually(t, 30*time.Second, "admission allows every image once the catalog is gone", func() error {
				return c.Create(ctx, probe, client.DryRunAll)
			})
		})
	case err != nil:
		t.Fatal(err)
	default:
		cat.Spec = spec
		if err := c.Update(ctx, cat); err != nil {
			t.Fatal(err)
		}
	}
}

func imageAllowed(t *testing.T, ns, name string) *metav1.Condition {
	t.Helper()
	tpl := &lullv1.SessionTemplate{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, tpl); err != nil {
		t.Fatal(err)
	}
	return meta.FindStatusCondition(tpl.Status.Conditions, lullv1.ConditionImageAllowed)
}

func patchTemplate(t *testing.T, ns, name, body string) {
	t.Helper()
	tpl := &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := c.Patch(context.Background(), tpl, client.RawPatch(types.MergePatchType, []byte(body))); err != nil {
		t.Fatalf("patch template %s: %v", body, err)
	}
}

// A template whose new image leaves the catalog mid-rollout shows
// ImageAllowed=False with a Warning Event, and the rollout moves no further
// session: the running ones keep their pods, a new session gets no pod.
// Once the catalog lists the image again, the rollout goes on and every
// session, the new one included, runs it.
func TestCatalogHoldsRollout(t *testing.T) {
	ctx := context.Background()
	one := intstr.FromInt32(1)
	ns, names, before := setupTemplate(t, 2, policy(lullv1.UpdatePolicy{Strategy: lullv1.UpdateStrategyDrain, MaxUnavailable: &one}),
		"--turn-min=200ms", "--turn-max=1s", "--think-max=100ms")
	applyCatalog(t, "v1", "v2")
	eventually(t, 20*time.Second, "ImageAllowed=True InCatalog", func() error {
		if c := imageAllowed(t, ns, "rt"); c == nil || c.Status != metav1.ConditionTrue || c.Reason != lullv1.ReasonInCatalog {
			return fmt.Errorf("ImageAllowed = %+v", c)
		}
		return nil
	})
	// An unlisted image is refused at admission, naming the catalog.
	if err := scenario.SetImage(ctx, c, ns, "rt", turnrunner+":v3"); err == nil || !strings.Contains(err.Error(), `RuntimeCatalog "default"`) {
		t.Fatalf("template moved to an unlisted image: %v", err)
	}

	// The update to v2 is admitted while paused, so no session has moved
	// yet when v2 leaves the catalog.
	patchTemplate(t, ns, "rt", `{"spec":{"updatePolicy":{"paused":true}}}`)
	rollout(t, ns, turnrunner+":v2")
	applyCatalog(t, "v1")
	eventually(t, 20*time.Second, "ImageAllowed=False ImageNotAllowed", func() error {
		c := imageAllowed(t, ns, "rt")
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != lullv1.ReasonImageNotAllowed || !strings.Contains(c.Message, turnrunner+":v2") {
			return fmt.Errorf("ImageAllowed = %+v", c)
		}
		return nil
	})
	eventually(t, 10*time.Second, "a Warning Event ImageNotAllowed on the template", func() error {
		var list eventsv1.EventList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Kind == "SessionTemplate" && e.Reason == lullv1.ReasonImageNotAllowed && e.Type == "Warning" {
				return nil
			}
		}
		return fmt.Errorf("no ImageNotAllowed event among %d", len(list.Items))
	})
	if out := lullCLI(t, "catalog", "--templates", "-n", ns); !strings.Contains(strings.Join(strings.Fields(out), " "), "rt "+turnrunner+":v2 refused False (ImageNotAllowed)") {
		t.Errorf("lull catalog --templates does not show the template refused:\n%s", out)
	}

	// Unpausing (an update that keeps the image) is admitted, and still
	// nobody moves; a new session gets no pod.
	patchTemplate(t, ns, "rt", `{"spec":{"updatePolicy":{"paused":false}}}`)
	late, err := scenario.CreateSessions(ctx, c, ns, "rt", "late", 1)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the new session shows ImageNotAllowed", func() error {
		r := meta.FindStatusCondition(session(t, ns, late[0]).Status.Conditions, lullv1.ConditionReady)
		if r == nil || r.Reason != lullv1.ReasonImageNotAllowed {
			return fmt.Errorf("Ready = %+v", r)
		}
		return nil
	})
	never(t, 5*time.Second, "no session moves while the image is not allowed", func() error {
		for _, n := range names {
			s := session(t, ns, n)
			if s.Status.Drain != nil {
				return fmt.Errorf("session %s: drain requested: %+v", n, s.Status.Drain)
			}
			if p := pod(t, ns, n); p == nil || string(p.UID) != before.Pods[n].UID || p.DeletionTimestamp != nil {
				return fmt.Errorf("session %s: pod replaced or going", n)
			}
		}
		err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: late[0]}, &appsv1.StatefulSet{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("the new session has a StatefulSet (or the read failed: %v)", err)
		}
		return nil
	})

	// The catalog lists v2 again: the rollout goes on.
	applyCatalog(t, "v1", "v2")
	all := append(append([]string{}, names...), late...)
	after, err := scenario.WaitFor(ctx, c, ns, all, 200*time.Millisecond, 90*time.Second, nil, scenario.Converged)
	if err != nil {
		t.Fatalf("rollout did not go on once the catalog listed the image: %v", err)
	}
	for _, n := range names {
		if after.Pods[n].UID == before.Pods[n].UID {
			t.Errorf("session %s still runs its old pod", n)
		}
	}
	if c := imageAllowed(t, ns, "rt"); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("ImageAllowed = %+v, want True", c)
	}
}
