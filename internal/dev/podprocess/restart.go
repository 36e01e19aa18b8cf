package podprocess

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// Restart back-off, as the kubelet's for a crashed container.
const (
	restartBackoff    = 10 * time.Second
	restartBackoffMax = 5 * time.Minute
	// upAfter is how long a restarted runtime must stay up before its
	// container shows running and ready again (there are no probes), so a
	// runtime that exits at once never looks ready.
	upAfter = time.Second
)

// supervise restarts c's process when it exits on its own, as a kubelet
// restarts a crashed container (or a restartable init container): after a
// back-off of 10 s, doubling up to 5 minutes (reset once a process has run
// for twice that), as long as the pod is still the same pod, Running and
// not being deleted. For the runtime container the pod's status shows
// CrashLoopBackOff during the back-off, and running again once the
// restarted process is up. It returns once p is stopped or its pod has
// gone.
func (r *Runner) supervise(ctx context.Context, p *proc, c *container) {
	defer r.wg.Done()
	pod := p.pod
	backoff := r.backoff
	var restarts int32
	for {
		r.mu.Lock()
		cur := c.cur
		r.mu.Unlock()
		if restarts > 0 && c.reportsStatus {
			// A restart: the container shows CrashLoopBackOff until the
			// process has been up for a moment.
			select {
			case <-time.After(r.upAfter):
				if _, err := r.patchContainer(ctx, p, true, func(cs *corev1.ContainerStatus) {
					cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(cur.started)}}
					cs.Ready, cs.Started, cs.RestartCount = true, ptr.To(true), restarts
				}); err != nil {
					r.logf("pod %s/%s (%s): report the restarted runtime running: %v\n", pod.Namespace, pod.Name, pod.UID, err)
				}
			case <-cur.done:
			case <-p.quit:
			case <-ctx.Done():
			}
		}
		select {
		case <-cur.done:
		case <-p.quit:
			return // halt waits for the process
		case <-ctx.Done():
			return
		}
		finished := time.Now()
		if p.quitting() || ctx.Err() != nil {
			return
		}

		// The process exited on its own while its pod runs.
		if finished.Sub(cur.started) >= 2*r.backoffMax {
			backoff = r.backoff // it had been running fine for long
		}
		restarts++
		alive, err := r.reportExit(ctx, p, c, cur, finished, backoff, restarts)
		if err != nil {
			r.logf("pod %s/%s (%s): report the crashed container %s: %v\n", pod.Namespace, pod.Name, pod.UID, c.name, err)
		}
		if !alive {
			return // the pod is gone, replaced, terminating or finished
		}
		r.logf("pod %s/%s (%s): container %s crashed (%s); restart %d in %s\n", pod.Namespace, pod.Name, pod.UID, c.name, exitText(cur.err), restarts, backoff)
		select {
		case <-time.After(backoff):
		case <-p.quit:
			return
		case <-ctx.Done():
			return
		}
		backoff = min(2*backoff, r.backoffMax)
		if alive, err := r.podRunning(ctx, p); err != nil {
			r.logf("pod %s/%s (%s): before restart: %v\n", pod.Namespace, pod.Name, pod.UID, err)
		} else if !alive {
			return
		}
		r.mu.Lock()
		err = r.launch(p, c)
		r.mu.Unlock()
		if err != nil {
			r.logf("pod %s/%s (%s): cannot restart container %s: %v\n", pod.Namespace, pod.Name, pod.UID, c.name, err)
			return
		}
	}
}

// reportExit records that c's process cur exited on its own: for the
// runtime container, CrashLoopBackOff in the pod's status with the exit
// and the log's last lines; for the sidecar, whose status the runner does
// not write, nothing. alive reports whether the pod still is the pod p ran
// for, Running and not being deleted.
func (r *Runner) reportExit(ctx context.Context, p *proc, c *container, cur *run, finished time.Time, backoff time.Duration, restarts int32) (alive bool, err error) {
	if !c.reportsStatus {
		return r.podRunning(ctx, p)
	}
	tail := logTail(c.log, 2)
	code, reason := exitCode(cur.err)
	return r.patchContainer(ctx, p, false, func(cs *corev1.ContainerStatus) {
		cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason:  "CrashLoopBackOff",
			Message: fmt.Sprintf("back-off %s restarting failed container %s (%s): %s", backoff, cs.Name, exitText(cur.err), tail),
		}}
		cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: code, Reason: reason, Message: tail,
			StartedAt: metav1.NewTime(cur.started), FinishedAt: metav1.NewTime(finished),
		}}
		cs.Ready, cs.Started, cs.RestartCount = false, ptr.To(false), restarts
	})
}

// podRunning reads p's pod: alive is true while it is the pod p ran for
// (same UID), Running and not being deleted.
func (r *Runner) podRunning(ctx context.Context, p *proc) (alive bool, err error) {
	_, alive, err = r.currentPod(ctx, p)
	return alive, err
}

func (r *Runner) currentPod(ctx context.Context, p *proc) (*corev1.Pod, bool, error) {
	pod, err := r.client.CoreV1().Pods(p.pod.Namespace).Get(ctx, p.pod.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, err // unknown: assume it still runs
	}
	alive := pod.UID == p.pod.UID && pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodRunning
	return pod, alive, nil
}

// patchContainer writes, as a kubelet does, the status of p's runtime
// container (set by mutate) and the pod's Ready and ContainersReady
// conditions, through the pods/status subresource. It reads the pod first
// and patches only the pod p ran for (same UID), Running and not being
// deleted, with the resourceVersion it read as a precondition, rereading
// on conflict: a new pod of the same name is never touched. alive reports
// whether the pod still is that pod, Running and not being deleted.
func (r *Runner) patchContainer(ctx context.Context, p *proc, ready bool, mutate func(*corev1.ContainerStatus)) (alive bool, err error) {
	name := runtimeContainer(p.pod).Name
	for range 5 {
		pod, alive, err := r.currentPod(ctx, p)
		if err != nil || !alive {
			return alive, err
		}
		st := pod.Status.DeepCopy()
		i := slices.IndexFunc(st.ContainerStatuses, func(cs corev1.ContainerStatus) bool { return cs.Name == name })
		if i < 0 {
			st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{Name: name, Image: runtimeContainer(pod).Image})
			i = len(st.ContainerStatuses) - 1
		}
		mutate(&st.ContainerStatuses[i])
		status, reason, msg := corev1.ConditionTrue, "", ""
		if !ready {
			status, reason, msg = corev1.ConditionFalse, "ContainersNotReady", fmt.Sprintf("containers with unready status: [%s]", name)
		}
		for _, typ := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady} {
			setPodCondition(st, corev1.PodCondition{Type: typ, Status: status, Reason: reason, Message: msg})
		}
		patch, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": pod.ResourceVersion},
			"status":   map[string]any{"conditions": st.Conditions, "containerStatuses": st.ContainerStatuses},
		})
		if err != nil {
			return true, err
		}
		_, err = r.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
		switch {
		case apierrors.IsConflict(err):
			continue // changed since read: read again
		case apierrors.IsNotFound(err):
			return false, nil
		}
		return true, err
	}
	return true, errors.New("status patch kept conflicting")
}

// setPodCondition sets a condition, moving its transition time only when
// its status changes.
func setPodCondition(st *corev1.PodStatus, c corev1.PodCondition) {
	now := metav1.Now()
	for i := range st.Conditions {
		if st.Conditions[i].Type != c.Type {
			continue
		}
		c.LastTransitionTime = st.Conditions[i].LastTransitionTime
		if st.Conditions[i].Status != c.Status {
			c.LastTransitionTime = now
		}
		c.LastProbeTime = st.Conditions[i].LastProbeTime
		st.Conditions[i] = c
		return
	}
	c.LastTransitionTime = now
	st.Conditions = append(st.Conditions, c)
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// exitCode returns a process's exit code as a kubelet reports it (128 +
// the signal for a killed process) and the termination reason.
func exitCode(err error) (int32, string) {
	if code, ok := programExitCode(err); ok {
		return code, "Error"
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		if err != nil {
			return 128, "Error"
		}
		return 0, "Completed"
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int32(ws.Signal()), "Error"
	}
	return int32(ee.ExitCode()), "Error"
}

// logTail returns the last n non-empty lines of a log, joined by " | ",
// at most 512 bytes.
func logTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "(no log)"
	}
	defer f.Close()
	const window = 8 << 10
	buf := make([]byte, window)
	size, _ := f.Seek(0, io.SeekEnd)
	off := max(size-window, 0)
	k, _ := f.ReadAt(buf, off)
	var lines []string
	for _, l := range strings.Split(string(buf[:k]), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if off > 0 && len(lines) > 0 {
		lines = lines[1:] // maybe cut
	}
	if len(lines) == 0 {
		return "(empty log)"
	}
	out := strings.Join(lines[max(len(lines)-n, 0):], " | ")
	if len(out) > 512 {
		out = "…" + out[len(out)-511:]
	}
	return out
}
