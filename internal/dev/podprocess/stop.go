package podprocess

import (
	"context"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// finalize finishes a pod's deletion as a kubelet does: the processes are
// stopped and the emptyDir volumes removed, then the pod is deleted with
// grace period 0 and its UID as a precondition, so a new pod of the same
// name is never touched. It runs once per pod UID.
func (r *Runner) finalize(ctx context.Context, pod *corev1.Pod) {
	r.mu.Lock()
	if r.finalizing[pod.UID] {
		r.mu.Unlock()
		return
	}
	r.finalizing[pod.UID] = true
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.stop(pod.UID)
		r.removeVolumes(pod)
		uid := pod.UID
		// Retried until it lands: nothing else changes a terminating pod,
		// so no later update would bring another try (an API server that
		// is restarting refuses the first ones).
		for wait := 200 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
			err := r.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
				GracePeriodSeconds: ptr.To[int64](0),
				Preconditions:      &metav1.Preconditions{UID: &uid},
			})
			if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				return
			}
			r.logf("pod %s/%s (%s): finish deletion: %v; retrying in %s\n", pod.Namespace, pod.Name, uid, err, wait)
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
	}()
}

// removeVolumes removes a pod's emptyDir volumes; the directories of its
// claims' volumes stay.
func (r *Runner) removeVolumes(pod *corev1.Pod) {
	if err := os.RemoveAll(r.volumeDir(pod.UID)); err != nil {
		r.logf("pod %s/%s (%s): remove emptyDir volumes: %v\n", pod.Namespace, pod.Name, pod.UID, err)
	}
}

// stop ends a pod's processes for good (see halt). The entry stays in
// procs so the pod is never started twice.
func (r *Runner) stop(uid types.UID) {
	r.mu.Lock()
	p, ok := r.procs[uid]
	r.mu.Unlock()
	if ok {
		r.halt(p)
	}
}

// stopForGood is stop for a pod removed or finished without finalize: the
// pod is first marked gone, under the lock start registers under, so a
// start still under way (its own goroutine, see startAsync) either
// registered before, and is stopped here, or registers nothing.
func (r *Runner) stopForGood(uid types.UID) {
	r.mu.Lock()
	if r.gone == nil {
		r.gone = map[types.UID]bool{}
	}
	r.gone[uid] = true
	r.mu.Unlock()
	r.stop(uid)
}

// halt ends p's processes with no restart, the runtime first and the agent
// sidecar after it, as a kubelet stops sidecars after the main containers:
// the agent is there to report the runtime's drain until the runtime is
// gone. It returns once both have exited.
func (r *Runner) halt(p *proc) {
	r.mu.Lock()
	p.quitOnce.Do(func() { close(p.quit) })
	r.mu.Unlock()
	for _, c := range []*container{p.runtime, p.agent} {
		if c == nil {
			continue
		}
		r.mu.Lock()
		cur := c.cur
		r.mu.Unlock()
		r.terminate(p, c, cur)
	}
}

// terminate ends one process: SIGTERM to its process group, SIGKILL after
// the grace period. It returns once the process has exited. An in-process
// runtime (ModeFleet) has its context cancelled instead; one that has not
// returned within the grace period cannot be killed: it is abandoned,
// logged, and terminate returns as after a SIGKILL, so the pod's deletion
// is not held up longer than a kubelet would hold it. The abandoned
// goroutine runs on until it returns (its pod-bound token stops working
// once the pod is gone); it is not restarted.
func (r *Runner) terminate(p *proc, c *container, cur *run) {
	if cur == nil {
		return
	}
	select {
	case <-cur.done:
		return
	default:
	}
	if cur.abandoned.Load() {
		return
	}
	cur.term()
	select {
	case <-cur.done:
	case <-time.After(r.opts.GracePeriod):
		if cur.kill == nil {
			cur.abandoned.Store(true)
			r.logf("pod %s/%s (%s): container %s did not return within the grace period of %s after its context was cancelled; abandoned (a goroutine cannot be killed)\n",
				p.pod.Namespace, p.pod.Name, p.pod.UID, c.name, r.opts.GracePeriod)
			return
		}
		cur.kill()
		<-cur.done
	}
}
