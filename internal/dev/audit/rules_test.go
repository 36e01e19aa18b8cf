package audit

import (
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func itoa(n int) string { return strconv.Itoa(n) }

// runningPod is a session pod whose runtime container is running.
func runningPod(uid types.UID) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s-0", UID: uid, Labels: map[string]string{lullv1.LabelSession: "s"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
			Name: lullv1.RuntimeContainerName, Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t0)}},
		}}},
	}
}

// pendingPod is a session pod that has no container status yet.
func pendingPod(uid types.UID) *corev1.Pod {
	p := runningPod(uid)
	p.Status = corev1.PodStatus{Phase: corev1.PodPending}
	return p
}

func withPhase(p *corev1.Pod, phase corev1.PodPhase) *corev1.Pod {
	p.Status.Phase = phase
	return p
}

// withRuntime replaces the runtime container's status.
func withRuntime(p *corev1.Pod, c corev1.ContainerStatus) *corev1.Pod {
	c.Name = lullv1.RuntimeContainerName
	p.Status.ContainerStatuses = []corev1.ContainerStatus{c}
	return p
}

func waiting(reason string, restarts int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{RestartCount: restarts, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}
}

// withSidecar adds a regular (init: a native sidecar) container waiting
// with reason.
func withSidecar(p *corev1.Pod, name string, init bool, reason string) *corev1.Pod {
	c := waiting(reason, 4)
	c.Name = name
	if init {
		p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, c)
	} else {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, c)
	}
	return p
}

func request(pod types.UID, id string, seq int64) *lullv1.DrainRequest {
	return &lullv1.DrainRequest{RequestID: id, PodUID: pod, Reason: lullv1.DrainReasonUpdate, Sequence: seq,
		RequestedAt: metav1.NewTime(t0.Add(time.Duration(seq) * time.Minute))}
}

func report(pod types.UID, id string, state lullv1.RuntimeState, active int32) *lullv1.RuntimeReport {
	return &lullv1.RuntimeReport{PodUID: pod, RequestID: id, State: state, ActiveTurns: active}
}

func withExpired(r *lullv1.RuntimeReport, n int64) *lullv1.RuntimeReport {
	r.ExpiredTurns = n
	return r
}

// Every rule that allows or refuses a deletion, as a pure function of the
// pod as last seen and the session's versions. The pod "p" is deleted at
// resourceVersion 100.
func TestJudge(t *testing.T) {
	const del = 100
	reqA, reqB := request("p", "update-a", 1), request("p", "update-b", 2)
	drainedA := report("p", "update-a", lullv1.RuntimeDrained, 0)
	sg := func(rv uint64, d *lullv1.DrainRequest, r *lullv1.RuntimeReport) Sighting {
		return Sighting{RV: rv, At: t0.Add(time.Duration(rv) * time.Second), Drain: d, Runtime: r}
	}
	forced := func(s Sighting, v string) Sighting { s.Force = v; return s }
	delAt := t0.Add(del * time.Second) // when the auditor saw the deletion
	deadlined := func(d *lullv1.DrainRequest, at time.Time) *lullv1.DrainRequest {
		d = d.DeepCopy()
		d.Deadline = &metav1.Time{Time: at}
		return d
	}
	tests := []struct {
		name      string
		pod       *corev1.Pod
		sightings []Sighting
		want      string // the ground that allows it ("drained", "failed", "never started", "forced"), or "" for a violation
		detail    string // for a violation: a substring of Detail
	}{
		{name: "Drained report for the outstanding request", pod: runningPod("p"),
			sightings: []Sighting{sg(10, reqA, report("p", "update-a", lullv1.RuntimeDraining, 1)), sg(20, reqA, drainedA)}, want: "drained"},
		{name: "no report", pod: runningPod("p"), sightings: []Sighting{sg(10, reqA, nil)}},
		{name: "Drained report written after the deletion", pod: runningPod("p"), sightings: []Sighting{sg(10, reqA, nil), sg(120, reqA, drainedA)}},
		{name: "Drained report for an old request ID", pod: runningPod("p"), sightings: []Sighting{sg(10, reqB, drainedA)}},
		{name: "Drained report that answered a request since replaced", pod: runningPod("p"),
			sightings: []Sighting{sg(10, reqA, drainedA), sg(20, reqB, drainedA)}},
		{name: "Drained report that answered a request since withdrawn", pod: runningPod("p"),
			sightings: []Sighting{sg(10, reqA, drainedA), sg(20, nil, drainedA)}},
		{name: "runtime reopened after its Drained report", pod: runningPod("p"),
			sightings: []Sighting{sg(10, reqA, drainedA), sg(20, reqA, report("p", "", lullv1.RuntimeServing, 0))}},
		{name: "reopened, then Drained for a new request", pod: runningPod("p"),
			sightings: []Sighting{sg(10, reqA, drainedA), sg(20, nil, report("p", "", lullv1.RuntimeServing, 0)), sg(30, reqB, report("p", "update-b", lullv1.RuntimeDrained, 0))}, want: "drained"},
		{name: "reopening delivered first but written after the deletion", pod: runningPod("p"),
			sightings: []Sighting{sg(120, nil, report("p", "", lullv1.RuntimeServing, 0)), sg(20, reqA, drainedA)}, want: "drained"},
		{name: "Drained with active turns", pod: runningPod("p"), sightings: []Sighting{sg(10, reqA, report("p", "update-a", lullv1.RuntimeDrained, 1))}},
		{name: "Drained report from another pod", pod: runningPod("p"),
			sightings: []Sighting{sg(10, reqA, report("old", "update-a", lullv1.RuntimeDrained, 0))}},
		{name: "request for another pod", pod: runningPod("p"),
			sightings: []Sighting{sg(10, request("other", "update-a", 1), drainedA)}},

		{name: "failing sidecar next to a running runtime", pod: withSidecar(runningPod("p"), "proxy", false, "CrashLoopBackOff"),
			sightings: []Sighting{sg(10, reqA, report("p", "update-a", lullv1.RuntimeDraining, 1))}, detail: "proxy CrashLoopBackOff"},
		{name: "native sidecar in ImagePullBackOff next to a running runtime", pod: withSidecar(runningPod("p"), "agent", true, "ImagePullBackOff"),
			detail: "agent ImagePullBackOff"},
		{name: "runtime in CrashLoopBackOff", pod: withRuntime(runningPod("p"), waiting("CrashLoopBackOff", 3)),
			sightings: []Sighting{sg(10, nil, report("p", "", lullv1.RuntimeServing, 1))}, want: "failed"},
		{name: "runtime in ErrImageNeverPull", pod: withRuntime(pendingPod("p"), waiting("ErrImageNeverPull", 0)), want: "failed,never started"},
		{name: "runtime in CreateContainerConfigError", pod: withRuntime(pendingPod("p"), waiting("CreateContainerConfigError", 0)), want: "failed,never started"},
		{name: "pod Failed", pod: withPhase(runningPod("p"), corev1.PodFailed), want: "failed"},
		{name: "pod Succeeded", pod: withPhase(runningPod("p"), corev1.PodSucceeded), want: "failed"},
		{name: "runtime waiting for another reason after a restart", pod: withRuntime(runningPod("p"), waiting("Unknown", 1)), detail: "restarts 1"},

		{name: "never started: no runtime status", pod: pendingPod("p"), want: "never started"},
		{name: "never started: runtime waiting behind a failing init container",
			pod: withSidecar(withRuntime(pendingPod("p"), waiting("PodInitializing", 0)), "setup", true, "CrashLoopBackOff"), want: "never started"},
		{name: "never started, but its runtime had reported", pod: pendingPod("p"),
			sightings: []Sighting{sg(10, nil, report("p", "", lullv1.RuntimeServing, 0))}, detail: "had reported"},
		{name: "never started; the report came after the deletion", pod: pendingPod("p"),
			sightings: []Sighting{sg(110, nil, report("p", "", lullv1.RuntimeServing, 0))}, want: "never started"},
		{name: "runtime terminated before: it had started", pod: withRuntime(pendingPod("p"), corev1.ContainerStatus{
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}})},

		{name: "forced: true", pod: runningPod("p"), sightings: []Sighting{forced(sg(10, reqA, nil), "true")}, want: "forced"},
		{name: "forced: the outstanding request ID", pod: runningPod("p"), sightings: []Sighting{forced(sg(10, reqB, nil), "update-b")}, want: "forced"},
		{name: "force naming an old request forces nothing", pod: runningPod("p"), sightings: []Sighting{forced(sg(10, reqB, nil), "update-a")}},
		{name: "force set after the deletion", pod: runningPod("p"), sightings: []Sighting{sg(10, reqA, nil), forced(sg(110, reqA, nil), "true")}},
		{name: "force removed before the deletion", pod: runningPod("p"), sightings: []Sighting{forced(sg(10, reqA, nil), "true"), sg(20, reqA, nil)}},

		{name: "deleted after the request's deadline", pod: runningPod("p"),
			sightings: []Sighting{sg(10, deadlined(reqA, delAt.Add(-time.Second)), report("p", "update-a", lullv1.RuntimeDraining, 2))}, want: "deadline passed"},
		{name: "deleted at the deadline", pod: runningPod("p"), sightings: []Sighting{sg(10, deadlined(reqA, delAt), nil)}, want: "deadline passed"},
		{name: "deleted before the request's deadline", pod: runningPod("p"),
			sightings: []Sighting{sg(10, deadlined(reqA, delAt.Add(time.Second)), report("p", "update-a", lullv1.RuntimeDraining, 2))}},
		{name: "a deadline of a request since withdrawn", pod: runningPod("p"),
			sightings: []Sighting{sg(10, deadlined(reqA, delAt.Add(-time.Minute)), nil), sg(20, nil, nil)}},
		{name: "a deadline for another pod", pod: runningPod("p"),
			sightings: []Sighting{sg(10, deadlined(request("other", "update-a", 1), delAt.Add(-time.Minute)), nil)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := Judge(tt.pod, del, delAt, tt.sightings)
			var grounds []string
			for _, b := range []struct {
				ok   bool
				name string
			}{{g.Drained, "drained"}, {g.Failed, "failed"}, {g.NeverStarted, "never started"}, {g.Forced, "forced"}, {g.DeadlinePassed, "deadline passed"}} {
				if b.ok {
					grounds = append(grounds, b.name)
				}
			}
			got := strings.Join(grounds, ",")
			if got != tt.want {
				t.Fatalf("grounds = %q, want %q (detail: %s)", got, tt.want, g.Detail)
			}
			d := Deletion{Namespace: "ns", Pod: "s-0", PodUID: "p", At: t0}
			d.Drained, d.Failed, d.NeverStarted, d.Forced, d.DeadlinePassed, d.Detail = g.Drained, g.Failed, g.NeverStarted, g.Forced, g.DeadlinePassed, g.Detail
			v := DeletionViolation(d)
			if (v == "") != (tt.want != "") {
				t.Errorf("violation = %q with grounds %q", v, got)
			}
			if tt.detail != "" && !strings.Contains(v, tt.detail) {
				t.Errorf("violation %q does not say %q", v, tt.detail)
			}
			if d.Exempt = "test"; DeletionViolation(d) != "" {
				t.Errorf("an exempt deletion is a violation: %q", DeletionViolation(d))
			}
		})
	}
}

// A drain request ID is never issued twice for a pod: the ledger flags one
// issued again with another time or sequence, or back after it was
// withdrawn or replaced, and nothing else.
func TestRequestLedger(t *testing.T) {
	s1 := types.NamespacedName{Namespace: "ns", Name: "s1"}
	a1 := request("p", "update-a", 1)
	tests := []struct {
		name  string
		steps []*lullv1.DrainRequest // status.drain of successive versions of s1
		want  []string               // one substring per expected violation
	}{
		{name: "one request, seen again and again (a restarted controller keeps it)", steps: []*lullv1.DrainRequest{a1, a1, a1.DeepCopy(), nil}},
		{name: "a new ID for every issuing", steps: []*lullv1.DrainRequest{a1, nil, request("p", "update-b", 2), request("p", "update-c", 3)}},
		{name: "same ID, another sequence", steps: []*lullv1.DrainRequest{a1, func() *lullv1.DrainRequest { r := a1.DeepCopy(); r.Sequence = 2; return r }(), a1.DeepCopy()},
			want: []string{"update-a for pod p of session ns/s1 was issued twice", "was issued twice"}},
		{name: "same ID, another requestedAt", steps: []*lullv1.DrainRequest{a1, func() *lullv1.DrainRequest {
			r := a1.DeepCopy()
			r.RequestedAt = metav1.NewTime(t0.Add(time.Hour))
			return r
		}()}, want: []string{"issued twice"}},
		{name: "withdrawn, then issued again", steps: []*lullv1.DrainRequest{a1, nil, a1}, want: []string{"request ID reused: drain request update-a for pod p of session ns/s1 reappeared after it was withdrawn"}},
		{name: "replaced, then back", steps: []*lullv1.DrainRequest{a1, request("p", "update-b", 2), a1}, want: []string{"reappeared"}},
		{name: "the same ID for another pod is another request", steps: []*lullv1.DrainRequest{a1, request("q", "update-a", 1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := NewRequestLedger()
			var got []string
			for _, d := range tt.steps {
				got = append(got, l.Observe(s1, d)...)
			}
			wantViolations(t, got, tt.want)
			for _, v := range got {
				if !strings.HasPrefix(v, "request ID reused") {
					t.Errorf("violation %q does not say request ID reused", v)
				}
			}
		})
	}
}
