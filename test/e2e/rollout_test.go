package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
	"lull.dev/lull/internal/dev/demo"
	"lull.dev/lull/internal/dev/scenario"
)

// stuck makes the reference runtime take one turn that never ends: a
// runtime that cannot drain.
var stuck = []string{"--turn-min=1h", "--turn-max=1h", "--think-max=0s"}

// A stale pod busy with a long turn is kept until the turn ends, then
// replaced, and the session ends on the new revision.
func TestLongTurnIsFinishedBeforeReplace(t *testing.T) {
	ns, names, before := setup(t, 1, "--turn-min=6s", "--turn-max=6s", "--think-max=0s")
	p1 := pod(t, ns, names[0])
	eventually(t, 10*time.Second, "first turn begins", func() error { return openTurn(t, p1.UID) })

	rollout(t, ns, "example.com/lull/turnrunner:v2")
	eventually(t, 10*time.Second, "runtime reports Draining with the turn in flight", func() error {
		s := session(t, ns, names[0])
		if r := s.Status.Runtime; r == nil || r.State != lullv1.RuntimeDraining || r.ActiveTurns != 1 || r.PodUID != p1.UID {
			return fmt.Errorf("runtime report %+v", s.Status.Runtime)
		}
		return nil
	})
	status := lullCLI(t, "status", "-n", ns, "rt")
	for _, want := range []string{names[0], "Draining", session(t, ns, names[0]).Status.Drain.RequestID} {
		if !strings.Contains(status, want) {
			t.Errorf("lull status does not show %q:\n%s", want, status)
		}
	}
	// Until the turn ends, the pod must stand.
	eventually(t, 15*time.Second, "the long turn ends", func() error {
		if p := pod(t, ns, names[0]); p == nil || p.UID != p1.UID || p.DeletionTimestamp != nil {
			if openTurn(t, p1.UID) == nil {
				t.Fatalf("pod %s was deleted while its turn was open", p1.UID)
			}
			return nil
		}
		return openTurn(t, p1.UID)
	})
	if _, err := scenario.WaitFor(context.Background(), c, ns, names, 100*time.Millisecond, 30*time.Second, nil, scenario.MovedFrom(before)); err != nil {
		t.Fatal(err)
	}
	for _, tr := range turnsOn(t, p1.UID) {
		if tr.Ended.IsZero() {
			t.Errorf("turn %d on the old pod never ended", tr.Turn)
		}
	}
	eventually(t, 10*time.Second, "session status shows the new revision", func() error {
		s := session(t, ns, names[0])
		if !meta.IsStatusConditionTrue(s.Status.Conditions, lullv1.ConditionUpToDate) || s.Status.Drain != nil || s.Status.Phase != lullv1.SessionRunning {
			return fmt.Errorf("phase %s, UpToDate=%v, drain=%+v", s.Status.Phase, meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionUpToDate), s.Status.Drain)
		}
		return nil
	})
	wantEvent(t, ns, names[0], "DrainRequested")
	wantEvent(t, ns, names[0], "Drained")
	wantEvent(t, ns, names[0], "Updated")
}

// A Drained report with a wrong request ID, or from the old pod's UID after
// the pod was recreated by someone else, deletes nothing; the exact request
// ID in lull.dev/force-update replaces the pod of a runtime that cannot
// drain.
func TestForgedReportsDeleteNothing(t *testing.T) {
	ns, names, _ := setup(t, 1, stuck...)
	name := names[0]
	p1 := pod(t, ns, name)
	eventually(t, 10*time.Second, "stuck turn begins", func() error { return openTurn(t, p1.UID) })

	rollout(t, ns, "example.com/lull/turnrunner:v2")
	var r1 string
	eventually(t, 10*time.Second, "drain requested for the first pod", func() error {
		d := session(t, ns, name).Status.Drain
		if d == nil || d.PodUID != p1.UID {
			return fmt.Errorf("drain = %+v", d)
		}
		r1 = d.RequestID
		return nil
	})

	forge := func(uid types.UID, id string) {
		patchStatus(t, session(t, ns, name), fmt.Sprintf(`{"status":{"runtime":{"podUID":%q,"requestID":%q,"state":"Drained","activeTurns":0}}}`, uid, id))
	}
	standing := func(uid types.UID) func() error {
		return func() error {
			p := pod(t, ns, name)
			if p == nil || p.UID != uid || p.DeletionTimestamp != nil {
				return fmt.Errorf("pod %s was deleted", uid)
			}
			return nil
		}
	}
	forge(p1.UID, drain.RequestID(p1.UID, lullv1.DrainReasonUpdate, 99))
	never(t, 3*time.Second, "Drained report with a wrong request ID", standing(p1.UID))

	// Someone else deletes the pod; the StatefulSet recreates it, current.
	auditor.Exempt(p1.UID, "deleted by the test")
	if err := c.Delete(context.Background(), p1, client.Preconditions{UID: &p1.UID}); err != nil {
		t.Fatal(err)
	}
	var p2 *corev1.Pod
	eventually(t, 15*time.Second, "pod recreated", func() error {
		p2 = pod(t, ns, name)
		if p2 == nil || p2.UID == p1.UID || p2.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("pod %+v", p2)
		}
		return openTurn(t, p2.UID)
	})

	rollout(t, ns, "example.com/lull/turnrunner:v3")
	var r2 string
	eventually(t, 10*time.Second, "drain requested for the second pod", func() error {
		d := session(t, ns, name).Status.Drain
		if d == nil || d.PodUID != p2.UID {
			return fmt.Errorf("drain = %+v", d)
		}
		r2 = d.RequestID
		return nil
	})
	forge(p1.UID, r2)
	never(t, 3*time.Second, "old pod UID with the current request ID", standing(p2.UID))
	forge(p1.UID, r1)
	never(t, 3*time.Second, "old pod UID with its old request ID", standing(p2.UID))
	forge(p2.UID, r1)
	never(t, 3*time.Second, "current pod UID with the old request ID", standing(p2.UID))

	// Break glass for this request only, as an operator would.
	lullCLI(t, "force", "-n", ns, name, "--request", r2, "--reason", "runtime cannot drain (e2e)")
	eventually(t, 15*time.Second, "forced replacement", func() error {
		p := pod(t, ns, name)
		if p == nil || p.UID == p2.UID || p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("pod %+v", p)
		}
		return nil
	})
	ev := wantEvent(t, ns, name, "Forced")
	if !strings.Contains(ev.Note, "lull-cli") || !strings.Contains(ev.Note, "runtime cannot drain") {
		t.Errorf("Forced event does not say who and why: %q", ev.Note)
	}
}

// A stale pod that failed is replaced without a drain; a current pod that
// keeps failing is not deleted in a loop.
func TestFailedPods(t *testing.T) {
	ns, names, before := setup(t, 1, stuck...)
	name := names[0]
	p1 := pod(t, ns, name)
	crashLoop(t, p1)

	rollout(t, ns, "example.com/lull/turnrunner:v2")
	if _, err := scenario.WaitFor(context.Background(), c, ns, names, 100*time.Millisecond, 20*time.Second, nil, scenario.MovedFrom(before)); err != nil {
		t.Fatalf("failed stale pod not replaced: %v", err)
	}
	wantEvent(t, ns, name, "PodFailed")
	if hasEvent(t, ns, name, "DrainRequested") {
		t.Error("a drain was requested of a failed pod")
	}

	p2 := pod(t, ns, name)
	crashLoop(t, p2)
	never(t, 8*time.Second, "current failing pod is kept", func() error {
		if p := pod(t, ns, name); p == nil || p.UID != p2.UID || p.DeletionTimestamp != nil {
			return fmt.Errorf("current pod %s was deleted", p2.UID)
		}
		return nil
	})
	eventually(t, 5*time.Second, "session shows Failed", func() error {
		if ph := session(t, ns, name).Status.Phase; ph != lullv1.SessionFailed {
			return fmt.Errorf("phase %s", ph)
		}
		return nil
	})
}

// Staleness comes from revisions, never from pod specs: a pod whose image
// was rewritten after admission but whose revision is the update revision
// is left alone.
func TestRewrittenImageIsNotStale(t *testing.T) {
	ns, names, _ := setup(t, 1, "--turn-min=200ms", "--turn-max=1s")
	name := names[0]
	p1 := pod(t, ns, name)
	patch := client.MergeFrom(p1.DeepCopy())
	p1.Spec.Containers[0].Image = "mirror.example.com/lull/turnrunner@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	if err := c.Patch(context.Background(), p1, patch); err != nil {
		t.Fatal(err)
	}
	never(t, 5*time.Second, "rewritten pod left alone", func() error {
		s := session(t, ns, name)
		if s.Status.Drain != nil {
			return fmt.Errorf("drain requested: %+v", s.Status.Drain)
		}
		if p := pod(t, ns, name); p == nil || p.UID != p1.UID || p.DeletionTimestamp != nil {
			return fmt.Errorf("pod replaced")
		}
		return nil
	})
	if !meta.IsStatusConditionTrue(session(t, ns, name).Status.Conditions, lullv1.ConditionUpToDate) {
		t.Error("session with a rewritten image is not UpToDate")
	}
}

// The controller killed in the middle of a drain and restarted continues
// with the same request and loses nothing.
func TestControllerRestartMidDrain(t *testing.T) {
	ns, names, before := setup(t, 1, "--turn-min=8s", "--turn-max=8s", "--think-max=0s")
	name := names[0]
	p1 := pod(t, ns, name)
	eventually(t, 10*time.Second, "first turn begins", func() error { return openTurn(t, p1.UID) })
	rollout(t, ns, "example.com/lull/turnrunner:v2")
	var first lullv1.DrainRequest
	eventually(t, 10*time.Second, "drain requested", func() error {
		d := session(t, ns, name).Status.Drain
		if d == nil {
			return fmt.Errorf("no drain request")
		}
		first = *d
		return nil
	})

	env.KillController()
	time.Sleep(time.Second)
	if err := env.StartController(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err := scenario.WaitFor(context.Background(), c, ns, names, 100*time.Millisecond, 30*time.Second, func(scenario.Fleet) {
		if d := session(t, ns, name).Status.Drain; d != nil && d.PodUID == p1.UID && *d != first {
			t.Errorf("drain request changed across the restart: %+v, was %+v", *d, first)
		}
	}, scenario.MovedFrom(before))
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range turnsOn(t, p1.UID) {
		if tr.Ended.IsZero() {
			t.Errorf("turn %d on the old pod was lost", tr.Turn)
		}
	}
}

// The demo path: many sessions, random turn lengths, one rollout, no turn
// interrupted.
func TestDemoRollout(t *testing.T) {
	o := demo.Defaults()
	o.Namespace, o.Sessions, o.TurnMin, o.TurnMax, o.Warmup, o.Timeout = "e2e-demo", 16, 500*time.Millisecond, 4*time.Second, 2*time.Second, 2*time.Minute
	o.Out = testWriter{t}
	s, err := demo.Run(context.Background(), env, o)
	if err != nil {
		t.Fatal(err)
	}
	s.Print(testWriter{t})
	if !s.OK() || s.TurnsInterrupted != 0 || s.Replaced < o.Sessions || s.TurnsCompleted == 0 {
		t.Fatalf("demo summary: %+v", s)
	}
}

// lullCLI runs the lull binary against the test cluster and returns its
// output.
func lullCLI(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(lullBin, append(args, "--kubeconfig", env.Cluster.Kubeconfig)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("lull %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// crashLoop makes a pod look like its container cannot start, as the
// kubelet would report it (KWOK leaves a Running pod's status alone).
// crashLoop fakes a crash loop of p's runtime container in its status, its
// last termination now. The runtime process lives on, so the fake is
// written only once that runtime has reported from p: a report written
// after the termination would rightly keep the pod (a report fresher than
// a failure is a live runtime, docs/protocol.md).
func crashLoop(t *testing.T, p *corev1.Pod) {
	t.Helper()
	eventually(t, 10*time.Second, "runtime reports from "+string(p.UID), func() error {
		if r := session(t, p.Namespace, p.Labels[lullv1.LabelSession]).Status.Runtime; r == nil || r.PodUID != p.UID {
			return fmt.Errorf("report %+v", r)
		}
		return nil
	})
	patch := client.MergeFrom(p.DeepCopy())
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: "runtime", Image: p.Spec.Containers[0].Image, Ready: false, RestartCount: 5,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off restarting failed container"}},
		// As the kubelet shows a crash loop: the last termination, now.
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 1, Reason: "Error", FinishedAt: metav1.Now(),
		}},
	}}
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodReady || p.Status.Conditions[i].Type == corev1.ContainersReady {
			p.Status.Conditions[i].Status = corev1.ConditionFalse
		}
	}
	if err := c.Status().Patch(context.Background(), p, patch); err != nil {
		t.Fatal(err)
	}
}

func sessionEvents(t *testing.T, ns, name string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "Session" && e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	return out
}

func hasEvent(t *testing.T, ns, name, reason string) bool {
	for _, e := range sessionEvents(t, ns, name) {
		if e.Reason == reason {
			return true
		}
	}
	return false
}

func wantEvent(t *testing.T, ns, name, reason string) eventsv1.Event {
	t.Helper()
	var found eventsv1.Event
	eventually(t, 5*time.Second, "event "+reason, func() error {
		for _, e := range sessionEvents(t, ns, name) {
			if e.Reason == reason {
				found = e
				return nil
			}
		}
		return fmt.Errorf("no %s event for session %s", reason, name)
	})
	return found
}

// Suspending a session drains it first: the pod busy with a turn is kept
// until the turn ends, then scaled away; resuming starts a new pod.
func TestSuspendDrainsFirst(t *testing.T) {
	ns, names, _ := setup(t, 1, "--turn-min=5s", "--turn-max=5s", "--think-max=0s")
	name := names[0]
	p1 := pod(t, ns, name)
	eventually(t, 10*time.Second, "first turn begins", func() error { return openTurn(t, p1.UID) })

	setSuspend(t, ns, name, true)
	eventually(t, 10*time.Second, "suspension drain requested", func() error {
		d := session(t, ns, name).Status.Drain
		if d == nil || d.Reason != lullv1.DrainReasonManual || d.PodUID != p1.UID {
			return fmt.Errorf("drain = %+v", d)
		}
		return nil
	})
	eventually(t, 20*time.Second, "pod scaled away after its turn", func() error {
		if p := pod(t, ns, name); p != nil && p.UID == p1.UID && p.DeletionTimestamp == nil {
			return fmt.Errorf("pod still running")
		}
		return nil
	})
	for _, tr := range turnsOn(t, p1.UID) {
		if tr.Ended.IsZero() {
			t.Errorf("turn %d was cut by the suspension", tr.Turn)
		}
	}
	eventually(t, 15*time.Second, "session Suspended", func() error {
		s := session(t, ns, name)
		if s.Status.Phase != lullv1.SessionSuspended || s.Status.Drain != nil || pod(t, ns, name) != nil {
			return fmt.Errorf("phase %s, drain %+v", s.Status.Phase, s.Status.Drain)
		}
		return nil
	})

	setSuspend(t, ns, name, false)
	eventually(t, 20*time.Second, "resumed", func() error {
		p := pod(t, ns, name)
		if p == nil || p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("no running pod")
		}
		if ph := session(t, ns, name).Status.Phase; ph != lullv1.SessionRunning {
			return fmt.Errorf("phase %s", ph)
		}
		return nil
	})
}

func setSuspend(t *testing.T, ns, name string, suspend bool) {
	t.Helper()
	s := session(t, ns, name)
	patch := client.MergeFrom(s.DeepCopy())
	s.Spec.Suspend = suspend
	if err := c.Patch(context.Background(), s, patch); err != nil {
		t.Fatal(err)
	}
}

// A brand-new StatefulSet whose status has no update revision yet triggers
// nothing: with the StatefulSet controller stopped, a new session gets its
// StatefulSet and no drain request, and waits with RevisionUnknown.
func TestNewStatefulSetWithoutRevisionTriggersNothing(t *testing.T) {
	ctx := context.Background()
	ns := "e2e-no-revision"
	if err := env.Cluster.StopControllerManager(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	restart := func() {
		if !restarted {
			restarted = true
			if err := env.Cluster.StartControllerManager(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer restart()
	names, err := scenario.Launch(ctx, c, scenario.Template(ns, "rt", "example.com/lull/turnrunner:v1"), "s", 1)
	if err != nil {
		t.Fatal(err)
	}
	name := names[0]
	eventually(t, 10*time.Second, "StatefulSet rendered", func() error {
		var sts appsv1.StatefulSet
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &sts); err != nil {
			return err
		}
		if sts.Status.UpdateRevision != "" {
			t.Fatalf("the StatefulSet controller is running: updateRevision %q", sts.Status.UpdateRevision)
		}
		return nil
	})
	never(t, 7*time.Second, "no drain, no pod, revision unknown", func() error {
		s := session(t, ns, name)
		if s.Status.Drain != nil {
			return fmt.Errorf("drain requested: %+v", s.Status.Drain)
		}
		if pod(t, ns, name) != nil {
			return fmt.Errorf("a pod exists")
		}
		return nil
	})
	if c := meta.FindStatusCondition(session(t, ns, name).Status.Conditions, lullv1.ConditionUpToDate); c == nil || c.Reason != "RevisionUnknown" {
		t.Errorf("UpToDate = %+v, want reason RevisionUnknown", c)
	}
	restart()
	if _, err := scenario.WaitFor(ctx, c, ns, names, 200*time.Millisecond, 30*time.Second, nil, scenario.Converged); err != nil {
		t.Fatal(err)
	}
	audited(t, ns)
}
