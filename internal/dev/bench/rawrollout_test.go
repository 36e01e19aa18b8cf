package bench

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// The raw rollout counts a set as moved only once it runs a pod, not
// terminating, at a published update revision other than the one before.
func TestObserveRawMovedFrom(t *testing.T) {
	set := func(name string, gen, observed int64, update string) *appsv1.StatefulSet {
		return &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: name, Generation: gen},
			Status:     appsv1.StatefulSetStatus{ObservedGeneration: observed, UpdateRevision: update},
		}
	}
	pod := func(set, uid, rev string, phase corev1.PodPhase, terminating bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: set + "-0", UID: types.UID("u-" + uid),
			Labels:          map[string]string{appsv1.ControllerRevisionHashLabelKey: rev},
			OwnerReferences: []metav1.OwnerReference{{Kind: "StatefulSet", Name: set, Controller: ptr.To(true)}}},
			Status: corev1.PodStatus{Phase: phase}}
		if terminating {
			p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		}
		return p
	}
	before := observeRaw(
		[]*appsv1.StatefulSet{set("a", 1, 1, "r1"), set("b", 1, 1, "r1"), set("c", 1, 1, "r1"), set("d", 1, 1, "r1")},
		[]*corev1.Pod{pod("a", "1", "r1", corev1.PodRunning, false), pod("b", "1", "r1", corev1.PodRunning, false),
			pod("c", "1", "r1", corev1.PodRunning, false), pod("d", "1", "r1", corev1.PodRunning, false)})
	if countCurrent(before) != 4 || before["a"].uid != "u-1" {
		t.Fatalf("before: %+v", before)
	}
	now := observeRaw(
		[]*appsv1.StatefulSet{set("a", 2, 2, "r2"), set("b", 2, 1, "r1"), set("c", 2, 2, "r2"), set("d", 2, 2, "r2")},
		[]*corev1.Pod{
			pod("a", "2", "r2", corev1.PodRunning, false), // moved
			pod("b", "1", "r1", corev1.PodRunning, false), // new revision not yet published
			pod("c", "2", "r2", corev1.PodPending, false), // not running yet
			pod("d", "1", "r1", corev1.PodRunning, true),  // stale, terminating
		})
	if got := countMoved(before, now); got != 1 {
		t.Errorf("moved %d, want 1 (a): %+v", got, now)
	}
}

// The protocol floor counts a session as reported only once its runtime
// reports Serving for the pod its set runs now: not the old pod's report,
// not a Drained one.
func TestProtocolFloorReportedForTheRunningPod(t *testing.T) {
	now := map[string]rawSet{"a": {uid: "new-a"}, "b": {uid: "new-b"}, "c": {uid: "new-c"}, "d": {}}
	rep := func(name, pod string, state lullv1.RuntimeState) lullv1.Session {
		return lullv1.Session{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: lullv1.SessionStatus{Runtime: &lullv1.RuntimeReport{PodUID: types.UID(pod), State: state}}}
	}
	sessions := []lullv1.Session{
		rep("a", "new-a", lullv1.RuntimeServing), // reported
		rep("b", "old-b", lullv1.RuntimeServing), // the old pod's report
		rep("c", "new-c", lullv1.RuntimeDrained), // not Serving
		rep("d", "", lullv1.RuntimeServing),      // no pod running
		{ObjectMeta: metav1.ObjectMeta{Name: "e"}},
	}
	if got := reportedFor(sessions, now); got != 1 {
		t.Errorf("reported %d, want 1 (a)", got)
	}
}

// The floor's StatefulSets are the raw rollout's, each under its own name
// and selector.
func TestFloorStatefulSetOwnsItsName(t *testing.T) {
	s := floorStatefulSet("ns", 7, "img")
	if s.Name != "proto-7" || s.Spec.ServiceName != "proto-7" || s.Spec.Selector.MatchLabels["app"] != "proto-7" ||
		s.Spec.Template.Labels["app"] != "proto-7" || s.Spec.Template.Spec.Containers[0].Image != "img" {
		t.Errorf("floor StatefulSet: %+v", s)
	}
	if raw := rawStatefulSet("ns", 7, "img"); raw.Name != "raw-7" || raw.Spec.Selector.MatchLabels["app"] != "raw-7" {
		t.Errorf("the raw rollout's set changed with the floor's: %+v", raw)
	}
}
