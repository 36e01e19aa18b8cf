package session

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Guarantee 3 of issue 21 (and so 1): evidence that a runtime started,
// once seen, is recorded by the controller at once, including on a path
// that writes nothing for a while (a settle wait), and cannot be erased
// by a later write to status.runtime.
//
// The scenario: alice's stale pod runs her runtime behind the drain
// sidecar (spec.agent). The kubelet shows both containers running. The
// sidecar has published its report naming the pod (Serving, one turn
// held). The template's wave has no place for alice yet, so the step is
// WaitingForWave, a passing state: nothing is written for SettleDelay.
// rollout.RecordStart does not make the write go at once: the kubelet
// shows the runtime container started, and RecordStart takes that for
// evidence enough. It is not, for a pod behind the sidecar: only a report
// naming the pod (or the record of one) says the sidecar speaks for the
// pod and holds its turns (SidecarHolds, startSeen); the kubelet's state
// of the runtime container says nothing of it.
//
// During the wait status.runtime is replaced (an admin's write, or the
// previous pod's delayed last report), and then the runtime container
// crashes and backs off, the sidecar still running with the turn begun
// through it. The next reconcile finds no report naming the pod and no
// record: SidecarHolds is false, PodFailure judges the runtime container
// failed, and the pod is committed PodFailed and deleted without a drain,
// under the turn the live sidecar holds.
func TestSidecarSeenSpeakingForThePodWhileWaitingForTheWaveSurvivesAnOverwrittenReport(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, func(s *lullv1.Session, pod *corev1.Pod) {
		withSidecar(pod)
		// The sidecar's report: no startedAt, as the sidecar writes it.
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, State: lullv1.RuntimeServing, ActiveTurns: 1}
	})
	ctx := context.Background()
	tmpl := &lullv1.SessionTemplate{}
	if err := w.c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "agent"}, tmpl); err != nil {
		t.Fatal(err)
	}
	tmpl.Status.Wave = nil // no place for alice yet
	if err := w.c.Status().Update(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	if _, err := w.reconcile(); err != nil { // sees the sidecar's report, waits for the wave
		t.Fatal(err)
	}
	recorded := w.session().Status.StartedPodUID

	overwriteReport(t, w, nil)
	// The runtime container crashes and backs off; the sidecar runs on,
	// holding the turn begun through it.
	crashed := t0.Add(2 * time.Second)
	pod := &corev1.Pod{}
	if err := w.c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "alice-0"}, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.ContainerStatuses[0] = corev1.ContainerStatus{Name: lullv1.RuntimeContainerName, RestartCount: 1,
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, FinishedAt: metav1.NewTime(crashed)}}}
	if err := w.c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	w.clock.SetTime(crashed.Add(time.Second))
	for range 3 {
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	if s := w.session(); !w.podExists() || (s.Status.Replacement != nil && s.Status.Replacement.Reason != lullv1.ReplacementDrained) {
		t.Fatalf("pod deleted or committed without a drain (replacement %+v; record after the first reconcile %q) after status.runtime was overwritten: "+
			"its running drain sidecar was seen speaking for the pod while the session waited for the wave, and holds a turn",
			s.Status.Replacement, recorded)
	}
}
