package podprocess

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A pod deleted outright (kubectl delete --force --grace-period=0: the
// informer sees only its removal) while its start is under way is left
// with no processes: the start that finishes after the stop registers
// nothing. Before starts ran in their own goroutine, the removal was
// handled only after the start, and stopped what it started.
func TestPodRemovedDuringItsStartKeepsNoProcesses(t *testing.T) {
	gate := newTokenGate("slow-0")
	e := newSlowTokenEnv(t, gate)
	// The fake clientset replays nothing to a watch: a deletion between
	// the informer's list and its watch would never reach the runner. A
	// pod created once the watch is recorded, and seen in the informer's
	// store, shows the watch runs.
	eventually(t, 10*time.Second, "the runner's pod watch", func() error {
		for _, a := range e.cs.Actions() {
			if a.GetVerb() == "watch" && a.GetResource().Resource == "pods" {
				return nil
			}
		}
		return errors.New("no watch of pods yet")
	})
	probe := runningPod("probe-0", "uid-probe")
	probe.Status.Phase = corev1.PodPending
	if _, err := e.cs.CoreV1().Pods("ns").Create(t.Context(), probe, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "probe-0 seen by the runner's watch", func() error {
		e.r.mu.Lock()
		store := e.r.pods
		e.r.mu.Unlock()
		if _, ok, _ := store.GetByKey("ns/probe-0"); !ok {
			return errors.New("not in the informer's store")
		}
		return nil
	})
	pod := runningPod("slow-0", "uid-slow")
	pod.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	if _, err := e.cs.CoreV1().Pods("ns").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gate.waitAsked(t)
	if err := e.cs.CoreV1().Pods("ns").Delete(t.Context(), "slow-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The removal has been handled once its emptyDir volumes are gone
	// (the handler stops the pod, then removes them).
	eventually(t, 10*time.Second, "slow-0's removal handled", func() error {
		if _, err := os.Stat(e.r.volumeDir(pod.UID)); !os.IsNotExist(err) {
			return fmt.Errorf("its volumes are still there (%v)", err)
		}
		return nil
	})
	gate.open()
	eventually(t, 10*time.Second, "slow-0's start finished", func() error {
		e.r.mu.Lock()
		defer e.r.mu.Unlock()
		if e.r.starting[pod.UID] {
			return errors.New("still starting")
		}
		return nil
	})
	e.r.mu.Lock()
	p, ok := e.r.procs[pod.UID]
	e.r.mu.Unlock()
	if ok && !p.quitting() {
		t.Fatalf("slow-0 was removed while starting, and its processes run on after its start finished")
	}
}
