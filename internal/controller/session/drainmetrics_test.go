package session

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
	"lull.dev/lull/internal/rollout"
)

// histogram reads one series of h: its sample count and sum.
func histogram(t *testing.T, h *prometheus.HistogramVec, labels ...string) (count uint64, sum float64) {
	t.Helper()
	m := &dto.Metric{}
	if err := h.WithLabelValues(labels...).(prometheus.Metric).Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// drainTimes reads both drain histograms of drainedWorld's template.
type drainTimes struct {
	drained, deleted       uint64
	drainedSum, deletedSum float64
}

func readDrainTimes(t *testing.T) drainTimes {
	t.Helper()
	var d drainTimes
	d.drained, d.drainedSum = histogram(t, requestToDrained, "ns", "agent", string(lullv1.DrainReasonUpdate))
	d.deleted, d.deletedSum = histogram(t, drainedToDelete, "ns", "agent")
	return d
}

func (d drainTimes) since(before drainTimes) drainTimes {
	return drainTimes{d.drained - before.drained, d.deleted - before.deleted, d.drainedSum - before.drainedSum, d.deletedSum - before.deletedSum}
}

// reportedWorld is drainedWorld whose runtime stamped its Drained report
// 42 s after the request, reconciled 1.5 s after the report. With hold,
// the pod has a finalizer: deleted, it stays terminating.
func reportedWorld(t *testing.T, funcs interceptor.Funcs, hold bool) *world {
	w := newWorld(t, funcs, func(s *lullv1.Session, pod *corev1.Pod) {
		id := drain.RequestID(pod.UID, lullv1.DrainReasonUpdate, 1)
		s.Status.DrainSequence = 1
		s.Status.Drain = &lullv1.DrainRequest{RequestID: id, PodUID: pod.UID, Reason: lullv1.DrainReasonUpdate, Revision: "alice-new", Sequence: 1, RequestedAt: metav1.NewTime(t0)}
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, RequestID: id, State: lullv1.RuntimeDrained, ReportedAt: &metav1.Time{Time: t0.Add(42 * time.Second)}}
		if hold {
			pod.Finalizers = []string{"example.com/hold"}
		}
	})
	w.clock.SetTime(t0.Add(43500 * time.Millisecond))
	return w
}

// podDeleted reports whether the pod is gone or terminating.
func (w *world) podDeleted() bool {
	pod := &corev1.Pod{}
	err := w.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "alice-0"}, pod)
	return err != nil || pod.DeletionTimestamp != nil
}

// One drain is one sample of each histogram, with the times its status
// holds, however often the session is reconciled afterwards and by however
// many controllers (a restarted one starts with no memory), while its pod
// is terminating.
func TestDrainTimesObservedOncePerDrain(t *testing.T) {
	w := reportedWorld(t, interceptor.Funcs{}, true)
	before := readDrainTimes(t)
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if !w.podDeleted() {
		t.Fatal("the Drained report did not replace the pod")
	}
	got := readDrainTimes(t).since(before)
	if want := (drainTimes{1, 1, 42, 1.5}); got != want {
		t.Fatalf("after the replacement: %+v, want %+v (one sample each: 42 s to drain, 1.5 s to delete)", got, want)
	}
	restarted := &Reconciler{Client: w.c, APIReader: w.c, Recorder: w.events, Clock: w.clock}
	for _, r := range []*Reconciler{w.r, restarted, w.r} {
		w.clock.SetTime(w.clock.Now().Add(10 * time.Second))
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: w.key}); err != nil {
			t.Fatal(err)
		}
	}
	if got := readDrainTimes(t).since(before); got != (drainTimes{1, 1, 42, 1.5}) {
		t.Fatalf("after more reconciles, one by a restarted controller: %+v, want still one sample each", got)
	}
}

// The controller that committed the replacement fails to delete the pod and
// a restarted one finishes it: the drain is measured once by the first,
// the delete once by the second, from the same report time.
func TestDrainTimesAcrossARestartBetweenCommitAndDelete(t *testing.T) {
	failDelete := true
	w := reportedWorld(t, interceptor.Funcs{
		Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
			if _, ok := o.(*corev1.Pod); ok && failDelete {
				return errors.New("connection reset")
			}
			return c.Delete(ctx, o, opts...)
		},
	}, false)
	before := readDrainTimes(t)
	if _, err := w.reconcile(); err == nil {
		t.Fatal("a failed delete must be an error (retried)")
	}
	if s := w.session(); s.Status.Replacement == nil {
		t.Fatal("the replacement was not committed")
	}
	if got := readDrainTimes(t).since(before); got != (drainTimes{1, 0, 42, 0}) {
		t.Fatalf("after the commit: %+v, want the drain measured and no delete", got)
	}
	failDelete = false
	w.clock.SetTime(t0.Add(50 * time.Second))
	restarted := &Reconciler{Client: w.c, APIReader: w.c, Recorder: w.events, Clock: w.clock}
	for range 2 {
		if _, err := restarted.Reconcile(context.Background(), ctrl.Request{NamespacedName: w.key}); err != nil {
			t.Fatal(err)
		}
	}
	if !w.podDeleted() {
		t.Fatal("the restarted controller did not finish the committed replacement")
	}
	if got := readDrainTimes(t).since(before); got != (drainTimes{1, 1, 42, 8}) {
		t.Fatalf("after the restarted controller's delete: %+v, want one sample each (8 s from report to delete)", got)
	}
}

// A pod replaced without a Drained report counts as a forced replacement
// by its reason, once, and in neither drain histogram.
func TestForcedReplacementCounted(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, func(s *lullv1.Session, _ *corev1.Pod) {
		s.Annotations = map[string]string{lullv1.AnnotationForceUpdate: "true"}
	})
	forced := forcedReplacements.WithLabelValues(lullv1.ReasonForced)
	before, times := testutil.ToFloat64(forced), readDrainTimes(t)
	for range 3 {
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	if w.podExists() {
		t.Fatal("the forced replacement did not delete the pod")
	}
	if got := testutil.ToFloat64(forced) - before; got != 1 {
		t.Errorf("lull_session_forced_replacements_total{reason=Forced} rose by %v, want 1", got)
	}
	if got := readDrainTimes(t).since(times); got != (drainTimes{}) {
		t.Errorf("drain histograms moved by %+v for a forced replacement, want nothing", got)
	}
}

func TestDrainDurations(t *testing.T) {
	req := &lullv1.DrainRequest{RequestID: "Update-1", PodUID: "p", Reason: lullv1.DrainReasonUpdate, RequestedAt: metav1.NewTime(t0)}
	drained := &lullv1.RuntimeReport{PodUID: "p", RequestID: "Update-1", State: lullv1.RuntimeDrained}
	session := func(d *lullv1.DrainRequest, r *lullv1.RuntimeReport) *lullv1.Session {
		return &lullv1.Session{Status: lullv1.SessionStatus{Drain: d, Runtime: r}}
	}
	for _, tc := range []struct {
		name     string
		s        *lullv1.Session
		reported time.Time
		want     time.Duration
		ok       bool
	}{
		{"Drained 90s after the request", session(req, drained), t0.Add(90 * time.Second), 90 * time.Second, true},
		{"report stamped before the request (clock skew) reads 0", session(req, drained), t0.Add(-time.Second), 0, true},
		{"no request", session(nil, drained), t0, 0, false},
		{"Draining report", session(req, &lullv1.RuntimeReport{PodUID: "p", RequestID: "Update-1", State: lullv1.RuntimeDraining}), t0, 0, false},
		{"Drained for another request", session(req, &lullv1.RuntimeReport{PodUID: "p", RequestID: "Update-0", State: lullv1.RuntimeDrained}), t0, 0, false},
		{"report time unknown", session(req, drained), time.Time{}, 0, false},
	} {
		if got, ok := RequestToDrained(tc.s, tc.reported); got != tc.want || ok != tc.ok {
			t.Errorf("RequestToDrained, %s = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}

	committed := rollout.Action{Kind: rollout.DeletePod, Replacement: &lullv1.Replacement{Reason: lullv1.ReplacementDrained}}
	if got, ok := DrainedToDelete(committed, t0, t0.Add(700*time.Millisecond)); got != 700*time.Millisecond || !ok {
		t.Errorf("DrainedToDelete of a drained replacement = %v, %v; want 700ms, true", got, ok)
	}
	failed := rollout.Action{Kind: rollout.DeletePod, Replacement: &lullv1.Replacement{Reason: lullv1.ReplacementPodFailed}}
	for name, a := range map[string]rollout.Action{"a failed pod's replacement": failed, "a forced delete": {Kind: rollout.DeletePod, Reason: lullv1.ReasonForced}} {
		if _, ok := DrainedToDelete(a, t0, t0.Add(time.Second)); ok {
			t.Errorf("DrainedToDelete of %s: ok, want no sample", name)
		}
	}

	at := metav1.NewTime(t0.Add(5 * time.Second))
	s := session(req, &lullv1.RuntimeReport{ReportedAt: &at})
	if got := ReportTime(s, time.Time{}); !got.Equal(at.Time) {
		t.Errorf("ReportTime without a write time = %v, want the runtime's reportedAt %v", got, at.Time)
	}
	if written := t0.Add(6 * time.Second); !ReportTime(s, written).Equal(written) {
		t.Errorf("ReportTime = %v, want the API server's write time %v", ReportTime(s, written), written)
	}
}

// The drain histograms hold a series per template; a template that goes
// takes its series with it, and leaves every other template's.
func TestDrainHistogramsForgetATemplateThatGoes(t *testing.T) {
	requestToDrained.WithLabelValues("forget-ns", "gone", string(lullv1.DrainReasonUpdate)).Observe(3)
	drainedToDelete.WithLabelValues("forget-ns", "gone").Observe(1)
	drainedToDelete.WithLabelValues("forget-ns", "kept").Observe(1)
	ForgetTemplateMetrics("forget-ns", "gone")
	if requestToDrained.DeleteLabelValues("forget-ns", "gone", string(lullv1.DrainReasonUpdate)) || drainedToDelete.DeleteLabelValues("forget-ns", "gone") {
		t.Error("a series of the deleted template is still held")
	}
	if !drainedToDelete.DeleteLabelValues("forget-ns", "kept") {
		t.Error("the series of another template of the namespace was deleted")
	}
}
