package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/journal"
	"lull.dev/lull/internal/dev/scenario"
	"lull.dev/lull/internal/dev/testenv"
)

// setup creates a namespace named after the test, a template running the
// reference runtime with args, and n sessions; it waits until they run.
func setup(t *testing.T, n int, args ...string) (ns string, names []string, before scenario.Fleet) {
	t.Helper()
	return setupTemplate(t, n, func(*lullv1.SessionTemplate) {}, args...)
}

// setupTemplate is setup with the template edited before it is created.
func setupTemplate(t *testing.T, n int, edit func(*lullv1.SessionTemplate), args ...string) (ns string, names []string, before scenario.Fleet) {
	t.Helper()
	ctx := context.Background()
	ns = strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(ns) > 50 {
		ns = ns[:50]
	}
	tmpl := scenario.Template(ns, "rt", "example.com/lull/turnrunner:v1", args...)
	edit(tmpl)
	names, err := scenario.Launch(ctx, c, tmpl, "s", n)
	if err != nil {
		t.Fatal(err)
	}
	before, err = scenario.WaitFor(ctx, c, ns, names, 200*time.Millisecond, time.Minute, nil, scenario.Converged)
	if err != nil {
		t.Fatalf("sessions did not start: %v", err)
	}
	t.Cleanup(func() { audited(t, ns) })
	return ns, names, before
}

// audited fails the test if the auditor found a violation in ns.
func audited(t *testing.T, ns string) {
	t.Helper()
	rep, err := auditor.Check(env.Runner.JournalDir(), ns)
	if err != nil {
		t.Fatalf("audit: %v", err)
	}
	for _, v := range rep.Violations {
		t.Errorf("audit violation: %s", v)
	}
	t.Logf("audit of %s: %d deletions, %d turns completed, %d interrupted, %d refused", ns, len(rep.Deletions), rep.Completed, len(rep.Interrupted), rep.Refused)
}

func session(t *testing.T, ns, name string) *lullv1.Session {
	t.Helper()
	s := &lullv1.Session{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

func pod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{}
	err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name + "-0"}, p)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// eventually is testenv.Eventually.
var eventually = testenv.Eventually

// never checks cond stays nil for d.
func never(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := cond(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// turnsOn returns the journaled turns of a pod.
func turnsOn(t *testing.T, uid types.UID) []journal.Turn {
	t.Helper()
	entries, err := journal.ReadDir(env.Runner.JournalDir())
	if err != nil {
		t.Fatal(err)
	}
	turns, _ := journal.Turns(entries)
	var out []journal.Turn
	for _, tr := range turns {
		if tr.PodUID == uid {
			out = append(out, tr)
		}
	}
	return out
}

func openTurn(t *testing.T, uid types.UID) error {
	for _, tr := range turnsOn(t, uid) {
		if tr.Ended.IsZero() {
			return nil
		}
	}
	return fmt.Errorf("no open turn on pod %s yet", uid)
}

// patchStatus merge-patches a session's status as the admin (the test
// playing a runtime that lies, or a controller).
func patchStatus(t *testing.T, s *lullv1.Session, body string) {
	t.Helper()
	if err := c.Status().Patch(context.Background(), s, client.RawPatch(types.MergePatchType, []byte(body))); err != nil {
		t.Fatalf("patch status %s: %v", body, err)
	}
}

func rollout(t *testing.T, ns, image string) {
	t.Helper()
	if err := scenario.SetImage(context.Background(), c, ns, "rt", image); err != nil {
		t.Fatal(err)
	}
}

// edit reads obj (its name and namespace set) from the API server, applies
// change and updates it, again from a fresh read when another writer got
// there first (a controller writing the template's or a quota's status
// moves the resourceVersion too).
func edit[T client.Object](t *testing.T, obj T, change func(T)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change(obj)
		return c.Update(context.Background(), obj)
	})
	if err != nil {
		t.Fatalf("update %T %s: %v", obj, obj.GetName(), err)
	}
}
