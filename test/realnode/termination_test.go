package realnode

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"lull.dev/lull/internal/dev/scenario"
)

// Termination is the kubelet's: a drained runtime that stops on SIGTERM
// is gone well within its pod's grace period; one that ignores SIGTERM is
// killed at the end of it (not before, not long after), and its session
// converges all the same.
func TestRealNodeTerminationKeepsTheGracePeriod(t *testing.T) {
	requireNode(t)
	for _, tc := range []struct {
		name        string
		ignore      bool
		grace       int64
		least, most time.Duration
	}{
		{name: "StopsOnSIGTERM", grace: 30, least: 0, most: 10 * time.Second},
		{name: "IgnoresSIGTERM", ignore: true, grace: 4, least: 4 * time.Second, most: 9 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := "real-term-" + map[bool]string{false: "stops", true: "ignores"}[tc.ignore]
			tmpl := scenario.Template(ns, "rt", "example.com/lull/turnrunner:v1", "--turn-min=200ms", "--turn-max=500ms", "--think-max=200ms")
			tmpl.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(tc.grace)
			if tc.ignore {
				rt := tmpl.RuntimeContainer()
				rt.Env = append(rt.Env, corev1.EnvVar{Name: "IGNORE_SIGTERM", Value: "true"})
			}
			if err := env.OnRealNode(tmpl); err != nil {
				t.Fatal(err)
			}
			names, err := scenario.Launch(t.Context(), c, tmpl, "s", 1)
			if err != nil {
				t.Fatal(err)
			}
			before, err := scenario.WaitFor(t.Context(), c, ns, names, 200*time.Millisecond, 3*time.Minute, nil, scenario.Converged)
			if err != nil {
				t.Fatalf("session did not start: %v", err)
			}
			uid := before.Pods[names[0]].UID
			if err := scenario.SetImage(t.Context(), c, ns, "rt", "example.com/lull/turnrunner:v2"); err != nil {
				t.Fatal(err)
			}
			// From the deletion the controller asks (after Drained) to the
			// pod's removal by the kubelet.
			var deleting, gone time.Time
			waitFor(t, 2*time.Minute, "the old pod removed", func() bool {
				var p corev1.Pod
				err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: names[0] + "-0"}, &p)
				now := time.Now()
				switch {
				case apierrors.IsNotFound(err) || (err == nil && string(p.UID) != uid):
					gone = now
					return true
				case err == nil && p.DeletionTimestamp != nil && deleting.IsZero():
					deleting = now
				}
				return false
			})
			if deleting.IsZero() {
				t.Fatal("the old pod was never seen terminating")
			}
			took := gone.Sub(deleting)
			t.Logf("grace %ds: pod removed %s after its deletion", tc.grace, took.Round(100*time.Millisecond))
			if took < tc.least || took > tc.most {
				t.Errorf("pod removed %s after its deletion, want between %s and %s", took.Round(100*time.Millisecond), tc.least, tc.most)
			}
			if _, err := scenario.WaitFor(t.Context(), c, ns, names, 200*time.Millisecond, 2*time.Minute, nil, scenario.MovedFrom(before)); err != nil {
				t.Fatalf("the session did not converge: %v", err)
			}
		})
	}
}
