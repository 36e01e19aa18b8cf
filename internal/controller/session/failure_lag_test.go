package session

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// runtimeWrite is the managed-fields entry of a runtime's write of
// status.runtime at the API server's time at.
func runtimeWrite(at time.Time) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: "lull-runtime", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status",
		Time: &metav1.Time{Time: at}, FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:runtime":{".":{},"f:podUID":{}}}}`)}}
}

// reportWrittenAt has every read of the session carry the runtime's write
// of status.runtime at *written (runtimeWrite), as the API server returns
// it: the fake store keeps no managed fields. A pointer, so that a test
// can move the write.
func reportWrittenAt(written *time.Time) interceptor.Funcs {
	return interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
		if err := c.Get(ctx, key, o, opts...); err != nil {
			return err
		}
		if s, ok := o.(*lullv1.Session); ok {
			s.ManagedFields = []metav1.ManagedFieldsEntry{runtimeWrite(*written)}
		}
		return nil
	}}
}

// crashLooping is the status of container name as the kubelet shows it
// between a crash and the restart it has not published yet: restarts
// restarts, waiting in CrashLoopBackOff, its last termination (exitCode)
// finished at finished.
func crashLooping(name string, restarts, exitCode int32, finished time.Time) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, RestartCount: restarts,
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exitCode, FinishedAt: metav1.NewTime(finished)}}}
}

// A stale pod in CrashLoopBackOff whose kubelet has restarted the runtime
// container but not yet published Running: the runtime has reported
// Serving since the container last terminated (the API server's time of
// the write, from managed fields) and holds a turn. It is drained, not
// deleted. The same pod whose report is from before the termination is
// replaced as failed.
func TestReportAfterCrashKeepsThePodOfALiveRuntime(t *testing.T) {
	finished := t0.Add(-20 * time.Second)
	for _, tc := range []struct {
		name    string
		written time.Time
		deleted bool
	}{
		{"report written after the restart", t0.Add(-2 * time.Second), false},
		{"report written before the crash", finished.Add(-3 * time.Second), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The fake store keeps no managed fields: reads get the
			// runtime's entry as the API server would return it.
			withWrite := reportWrittenAt(&tc.written)
			w := newWorld(t, withWrite, func(s *lullv1.Session, pod *corev1.Pod) {
				pod.Status.ContainerStatuses[0] = crashLooping(lullv1.RuntimeContainerName, 4, 2, finished)
				s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, State: lullv1.RuntimeServing, ActiveTurns: 1}
			})
			if _, err := w.reconcile(); err != nil {
				t.Fatal(err)
			}
			if deleted := !w.podExists(); deleted != tc.deleted {
				t.Fatalf("pod deleted = %v, want %v (replacement %+v)", deleted, tc.deleted, w.session().Status.Replacement)
			}
			if !tc.deleted {
				if d := w.session().Status.Drain; d == nil || d.PodUID != w.podUID {
					t.Errorf("drain = %+v, want a request for the live runtime's pod", d)
				}
			}
		})
	}
}

// The restarted runtime's report, seen while the kubelet still shows the
// crash-loop back-off, is recorded at once (status.startedReportTime, in
// the step's one write): an admin's write that replaces status.runtime
// before the kubelet publishes the restart does not make the pod failed
// and deleted under the turn.
func TestRecordedRestartSurvivesAnOverwrittenReport(t *testing.T) {
	finished := t0.Add(-20 * time.Second)
	written := t0.Add(-2 * time.Second)
	withWrite := reportWrittenAt(&written)
	w := newWorld(t, withWrite, func(s *lullv1.Session, pod *corev1.Pod) {
		pod.Status.ContainerStatuses[0] = crashLooping(lullv1.RuntimeContainerName, 4, 2, finished)
		s.Status.StartedPodUID = pod.UID // seen in an earlier run
		s.Status.StartedReportTime = &metav1.Time{Time: finished.Add(-time.Minute)}
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, State: lullv1.RuntimeServing, ActiveTurns: 1}
	})
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if at := w.session().Status.StartedReportTime; at == nil || !at.Time.Equal(written) {
		t.Fatalf("status.startedReportTime = %v, want the restarted runtime's report at %s", at, written)
	}
	if got := w.patches.Load(); got != 1 {
		t.Errorf("status patches = %d, want 1: the record rides on the drain request", got)
	}
	overwriteReport(t, w, nil)
	for range 3 {
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	if !w.podExists() {
		t.Fatalf("pod deleted (replacement %+v) after status.runtime was overwritten: its restarted runtime was seen", w.session().Status.Replacement)
	}
}

// withSidecar gives the pod the injected drain sidecar (a native sidecar,
// the first init container) running since before the runtime container's
// crashes, as the kubelet shows it.
func withSidecar(pod *corev1.Pod) {
	always := corev1.ContainerRestartPolicyAlways
	pod.Spec.InitContainers = []corev1.Container{{Name: lullv1.AgentContainerName, Image: lullv1.DefaultAgentImage, RestartPolicy: &always}}
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: lullv1.AgentContainerName, Started: ptrTo(true),
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t0.Add(-time.Hour))}}}}
}

// A stale pod whose runtime runs behind the drain sidecar (spec.agent): the
// kubelet has restarted the crash-looping runtime container, the runtime
// has begun a turn through the sidecar, and the kubelet still shows
// CrashLoopBackOff. The sidecar writes a turn count only at its refresh,
// so its last report is from before the runtime's last termination. The
// sidecar, still running, holds the pod's turns and answers a drain: the
// pod is drained, not deleted, and is replaced only once the sidecar
// answers Drained.
func TestSidecarHoldsTheTurnsOfACrashLoopingRuntime(t *testing.T) {
	finished := t0.Add(-20 * time.Second)
	written := finished.Add(-30 * time.Second) // the sidecar's last refresh
	withWrite := reportWrittenAt(&written)
	w := newWorld(t, withWrite, func(s *lullv1.Session, pod *corev1.Pod) {
		withSidecar(pod)
		pod.Status.ContainerStatuses[0] = crashLooping(lullv1.RuntimeContainerName, 4, 2, finished)
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, State: lullv1.RuntimeServing, ActiveTurns: 1}
	})
	for range 3 {
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	if !w.podExists() {
		t.Fatalf("pod deleted (replacement %+v) under the turn its sidecar holds", w.session().Status.Replacement)
	}
	s := w.session()
	d := s.Status.Drain
	if d == nil || d.PodUID != w.podUID {
		t.Fatalf("drain = %+v, want a request for the sidecar's pod", d)
	}
	if c := meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionReady); c == nil || c.Reason != lullv1.ReasonPodFailed {
		t.Errorf("Ready = %+v, want reason %s: the runtime container is failing, whoever holds its turns", c, lullv1.ReasonPodFailed)
	}

	// The turn ends (or its lease expires); the sidecar answers Drained.
	written = t0.Add(time.Second)
	w.clock.SetTime(written)
	overwriteReport(t, w, &lullv1.RuntimeReport{PodUID: w.podUID, RequestID: d.RequestID, State: lullv1.RuntimeDrained})
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if w.podExists() {
		t.Fatalf("pod kept after its sidecar answered Drained (replacement %+v)", w.session().Status.Replacement)
	}
	if c := w.session().Status.Replacement; c == nil || c.Reason != lullv1.ReplacementDrained || c.RequestID != d.RequestID {
		t.Errorf("replacement = %+v, want Drained for request %s", c, d.RequestID)
	}
}
