package session

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// The states a committed replacement passes through are written only if
// one lasts ReplacingSettleDelay: the status already says the pod is being
// replaced. Without a commitment the same state is written after
// SettleDelay.
func TestPassingStateOfAReplacementWaitsLonger(t *testing.T) {
	for _, tc := range []struct {
		name      string
		replacing bool
		written   bool // at SettleDelay + 1
	}{
		{"no commitment: written after SettleDelay", false, true},
		{"committed replacement: not yet", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, interceptor.Funcs{}, func(s *lullv1.Session, pod *corev1.Pod) {
				// The new pod, at the update revision, its runtime not
				// yet started: a passing state.
				pod.Labels[appsv1.ControllerRevisionHashLabelKey] = "alice-new"
				pod.Status = corev1.PodStatus{Phase: corev1.PodPending}
				if tc.replacing {
					s.Status.Replacement = &lullv1.Replacement{PodUID: "pod-0", Reason: lullv1.ReplacementDrained, RequestID: "r"}
				}
			})
			res, err := w.reconcile()
			if err != nil {
				t.Fatal(err)
			}
			if w.patches.Load() != 0 || res.RequeueAfter <= 0 {
				t.Fatalf("a fresh passing state: %d status patches, requeue %v; want none and a look again", w.patches.Load(), res.RequeueAfter)
			}
			w.clock.SetTime(t0.Add(SettleDelay + 1))
			if _, err := w.reconcile(); err != nil {
				t.Fatal(err)
			}
			if got := w.patches.Load() != 0; got != tc.written {
				t.Fatalf("after SettleDelay: written %v, want %v", got, tc.written)
			}
			if tc.written {
				return
			}
			w.clock.SetTime(t0.Add(ReplacingSettleDelay + 1))
			if _, err := w.reconcile(); err != nil {
				t.Fatal(err)
			}
			if w.patches.Load() == 0 {
				t.Fatalf("a replacement's passing state that lasted %v is not written", ReplacingSettleDelay)
			}
		})
	}
}
