package session

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// A reconcile that goes through looks again at the soonest of its waits:
// the step's own (a drain request's deadline), the next moment the clock
// alone changes the session's lifecycle (a first report due), and how long
// a passing state has yet to last before it is written. A step whose
// commitment was its status write looks again only when its step asks.
func TestReconcileLooksAgainAtTheSoonestOfItsWaits(t *testing.T) {
	readySoon := func(_ *lullv1.Session, pod *corev1.Pod) {
		// Ready for 28 s, no report of its own: its first report is due
		// in 2 s (lifecycle.FirstReportGrace).
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(-28 * time.Second))}}
	}
	template := func(edit func(tmpl *lullv1.SessionTemplate)) func(t *testing.T, w *world) {
		return func(t *testing.T, w *world) {
			t.Helper()
			tmpl := &lullv1.SessionTemplate{}
			if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "agent"}, tmpl); err != nil {
				t.Fatal(err)
			}
			// Each write returns the stored object: the spec's and the
			// status's changes are made on the copy each writes.
			edit(tmpl)
			if err := w.c.Update(context.Background(), tmpl); err != nil {
				t.Fatal(err)
			}
			edit(tmpl)
			if err := w.c.Status().Update(context.Background(), tmpl); err != nil {
				t.Fatal(err)
			}
		}
	}
	deadline := template(func(tmpl *lullv1.SessionTemplate) {
		tmpl.Spec.UpdatePolicy.DrainTimeout = &metav1.Duration{Duration: 10 * time.Minute}
	})
	noPlace := template(func(tmpl *lullv1.SessionTemplate) { tmpl.Status.Wave = nil })
	for _, tc := range []struct {
		name   string
		edit   func(s *lullv1.Session, pod *corev1.Pod)
		before func(t *testing.T, w *world)
		want   time.Duration
	}{
		{name: "a drain request with a deadline", before: deadline, want: 10*time.Minute + time.Second/10},
		{name: "a drain request with a deadline, a first report due sooner", edit: readySoon, before: deadline, want: 2*time.Second + time.Second/10},
		{name: "a wait for the wave, not yet settled", before: noPlace, want: SettleDelay},
		{name: "a wait for the wave, a first report due sooner", edit: readySoon, before: noPlace, want: 2*time.Second + time.Second/10},
		{name: "a drain request without a deadline", want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, interceptor.Funcs{}, tc.edit)
			if tc.before != nil {
				tc.before(t, w)
			}
			res, err := w.reconcile()
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter != tc.want {
				t.Errorf("RequeueAfter = %s, want %s", res.RequeueAfter, tc.want)
			}
		})
	}
	t.Run("a commitment carried through", func(t *testing.T) {
		w := drainedWorld(t, interceptor.Funcs{})
		res, err := w.reconcile()
		if err != nil || w.podExists() {
			t.Fatalf("reconcile = %v, pod still there: %t; want the commitment carried through", err, w.podExists())
		}
		if res.RequeueAfter != 0 {
			t.Errorf("RequeueAfter = %s, want none: the delete's watch event brings the next step", res.RequeueAfter)
		}
	})
}
