package session

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// A session whose workspace claim is bound to a local volume of its
// cordoned node gets no node drain request: its replacement could never
// start elsewhere. Its pod and budget stay, and PinnedToNode names the
// claim, the volume and the node, with one Warning Event.
func TestCordonedNodeWithAPinnedSessionSendsNoDrainRequest(t *testing.T) {
	const claim = "workspace-alice-0"
	w := newWorld(t, interceptor.Funcs{}, func(s *lullv1.Session, pod *corev1.Pod) {
		onCordonedNode(s, pod)
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "workspace",
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
	})
	ctx := context.Background()
	for _, n := range []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: drainedNode, Labels: map[string]string{corev1.LabelHostname: drainedNode}}, Spec: corev1.NodeSpec{Unschedulable: true}},
		{ObjectMeta: metav1.ObjectMeta{Name: "kwok-node-2", Labels: map[string]string{corev1.LabelHostname: "kwok-node-2"}}},
	} {
		if err := w.c.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-local-1"}, Spec: corev1.PersistentVolumeSpec{
		Capacity:               corev1.ResourceList{},
		PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/disks/1"}},
		NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{drainedNode}}}}}}}}}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: claim}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: pv.Name}}
	if err := w.c.Create(ctx, pv); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	// The pod not yet Ready is a passing state: written once settled.
	for i := range 3 {
		w.clock.SetTime(t0.Add(time.Duration(i) * (SettleDelay + time.Second)))
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	s := w.session()
	if s.Status.Drain != nil {
		t.Fatalf("status.drain %+v; want no drain request for a pinned session", s.Status.Drain)
	}
	if !w.podExists() || len(w.deletes) != 0 || w.budget() == nil {
		t.Fatal("the pinned session's pod or budget was touched")
	}
	c := meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionPinnedToNode)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != lullv1.ReasonVolumeNodeAffinity {
		t.Fatalf("conditions %+v; want PinnedToNode True VolumeNodeAffinity", s.Status.Conditions)
	}
	for _, want := range []string{claim, pv.Name, drainedNode} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("condition message %q does not name %s", c.Message, want)
		}
	}
	if n := w.count(lullv1.ReasonVolumeNodeAffinity); n != 1 {
		t.Errorf("%d VolumeNodeAffinity Events over three reconciles; want one", n)
	}
}
