package session

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// creating: the kubelet shows the runtime container still being created,
// never started, although its runtime runs (the kubelet publishes late).
func creating(pod *corev1.Pod) {
	pod.Status.ContainerStatuses[0] = corev1.ContainerStatus{Name: lullv1.RuntimeContainerName,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
}

// overwriteReport replaces status.runtime as an admin would, with a report
// of another pod (nil removes it).
func overwriteReport(t *testing.T, w *world, r *lullv1.RuntimeReport) {
	t.Helper()
	s := w.session()
	s.Status.Runtime = r
	if err := w.c.Status().Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// notAdmitted empties the template's wave: the stale session is not
// admitted yet and waits for a place in it (WaitingForWave, a passing
// state, whose write settles).
func notAdmitted(t *testing.T, w *world) {
	t.Helper()
	tmpl := &lullv1.SessionTemplate{}
	if err := w.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "agent"}, tmpl); err != nil {
		t.Fatal(err)
	}
	tmpl.Status.Wave = nil
	if err := w.c.Status().Update(context.Background(), tmpl); err != nil {
		t.Fatal(err)
	}
}

// A stale pod whose runtime has reported Serving and holds a turn while the
// kubelet still shows ContainerCreating: the controller records that it saw
// the runtime started (status.startedPodUID) with the step it writes, at
// once, even when that step is a passing state whose write would otherwise
// wait (WaitingForWave). A later write that replaces status.runtime erases
// the report, not the record: the pod is never judged never started, and
// is not deleted.
func TestRecordedStartSurvivesAnOverwrittenReport(t *testing.T) {
	for _, tc := range []struct {
		name     string
		admitted bool
	}{
		{"drain requested", true},
		{"waiting for a place in the wave", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, interceptor.Funcs{}, func(s *lullv1.Session, pod *corev1.Pod) {
				creating(pod)
				s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, State: lullv1.RuntimeServing, ActiveTurns: 1}
			})
			if !tc.admitted {
				notAdmitted(t, w)
			}
			if _, err := w.reconcile(); err != nil {
				t.Fatal(err)
			}
			if got := w.session().Status.StartedPodUID; got != w.podUID {
				t.Fatalf("status.startedPodUID = %q after the reconcile that saw the report, want %q", got, w.podUID)
			}
			if got := w.patches.Load(); got != 1 {
				t.Errorf("status patches = %d, want 1: the record rides on the step's write", got)
			}
			overwriteReport(t, w, &lullv1.RuntimeReport{PodUID: "pod-0", State: lullv1.RuntimeServing})
			for range 3 {
				if _, err := w.reconcile(); err != nil {
					t.Fatal(err)
				}
			}
			s := w.session()
			if !w.podExists() || s.Status.Replacement != nil {
				t.Fatalf("pod deleted (replacement %+v) after status.runtime was overwritten: its runtime was seen started", s.Status.Replacement)
			}
			if s.Status.StartedPodUID != w.podUID {
				t.Errorf("status.startedPodUID = %q, want it kept for pod %s", s.Status.StartedPodUID, w.podUID)
			}
		})
	}
}

// The record names the session's pod only: a new pod of the session has no
// start seen until its runtime reports, and a stale pod that has truly
// never started (no report, no record) is still replaced without a drain.
func TestRecordedStartNamesOnlyTheSessionsPod(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, func(s *lullv1.Session, pod *corev1.Pod) {
		creating(pod)
		s.Status.StartedPodUID = "pod-0" // the pod this one replaced
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: "pod-0", State: lullv1.RuntimeDrained}
	})
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	s := w.session()
	if c := s.Status.Replacement; c == nil || c.Reason != lullv1.ReplacementNeverStarted {
		t.Fatalf("replacement = %+v, want the never-started pod committed", c)
	}
	if s.Status.StartedPodUID != "" {
		t.Errorf("status.startedPodUID = %q, want the previous pod's record dropped", s.Status.StartedPodUID)
	}
}

// What the record costs: nothing when the kubelet shows the runtime
// started by the time the controller sees its report (the record rides on
// the write of the session running its new pod), and one status write
// when the report comes first, as the record is then the only evidence
// that the runtime started.
func TestRecordedStartCostsAWriteOnlyWhenItIsTheOnlyEvidence(t *testing.T) {
	for _, tc := range []struct {
		name        string
		reportFirst bool
		want        int32
	}{
		{name: "kubelet first", reportFirst: false, want: 1},
		{name: "report first", reportFirst: true, want: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, interceptor.Funcs{}, func(s *lullv1.Session, pod *corev1.Pod) {
				pod.Labels[appsv1.ControllerRevisionHashLabelKey] = "alice-new" // a new pod, current
				creating(pod)
				pod.Status.Phase = corev1.PodPending
			})
			if _, err := w.reconcile(); err != nil { // the new pod, not yet running: a passing state
				t.Fatal(err)
			}
			if got := w.patches.Load(); got != 0 {
				t.Fatalf("status patches for a pod starting = %d, want 0 (a passing state)", got)
			}
			running := func() {
				pod := &corev1.Pod{}
				if err := w.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "alice-0"}, pod); err != nil {
					t.Fatal(err)
				}
				pod.Status.Phase = corev1.PodRunning
				pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
				pod.Status.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t0)}}
				if err := w.c.Status().Update(context.Background(), pod); err != nil {
					t.Fatal(err)
				}
			}
			reported := func() {
				overwriteReport(t, w, &lullv1.RuntimeReport{PodUID: w.podUID, State: lullv1.RuntimeServing})
			}
			steps := []func(){running, reported}
			if tc.reportFirst {
				steps = []func(){reported, running}
			}
			for _, step := range steps {
				step()
				if _, err := w.reconcile(); err != nil {
					t.Fatal(err)
				}
			}
			if got := w.session().Status.StartedPodUID; got != w.podUID {
				t.Errorf("status.startedPodUID = %q, want %q", got, w.podUID)
			}
			if got := w.patches.Load(); got != tc.want {
				t.Errorf("status patches = %d, want %d", got, tc.want)
			}
		})
	}
}
