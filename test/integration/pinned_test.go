package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// A session whose workspace claim is bound to a local volume of its node:
// cordoned, the node gets no drain request from it (a replacement
// elsewhere could never start); its budget keeps refusing the eviction
// (429), and PinnedToNode names the claim, the volume and the node, with
// a Warning Event, until the node is uncordoned.
func TestNodeDrainOfAPinnedSessionSendsNoDrain(t *testing.T) {
	t.Parallel()
	ns := startManager(t)
	n := runs.Add(1)
	node := fmt.Sprintf("pinned-%s-%d", ns, n)
	if err := admin.Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{corev1.LabelHostname: node}}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})
	name := fmt.Sprintf("pin%d", n)
	claim := "workspace-" + name + "-0"
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-" + node}, Spec: corev1.PersistentVolumeSpec{
		Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
		AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		StorageClassName:       "local",
		PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/disks/1"}},
		ClaimRef:               &corev1.ObjectReference{Namespace: ns, Name: claim},
		NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}}}}
	if err := admin.Create(t.Context(), pv); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), pv) })
	sc := "local"
	// As the StatefulSet controller makes it from a claim template: with the
	// pod's labels, lull.dev/session among them (the cache holds only those).
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: claim, Labels: map[string]string{lullv1.LabelSession: name}}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: &sc, VolumeName: pv.Name,
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if err := admin.Create(t.Context(), pvc); err != nil {
		t.Fatal(err)
	}

	tpl := newTemplate(ns, name, "example.com/runtime:v1")
	if err := admin.Create(t.Context(), tpl); err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(t.Context(), newSession(ns, name, tpl.Name)); err != nil {
		t.Fatal(err)
	}
	ds := &nodeDrainSession{ns: ns, name: name, node: node, sts: &appsv1.StatefulSet{}}
	eventually(t, 10*time.Second, "StatefulSet is created", func(ctx context.Context) error {
		return admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, ds.sts)
	})
	setRevisions(t, ns, name, "rev-1", "rev-1")
	ds.pod = createPodOnWith(t, ds.sts, "rev-1", node, func(pod *corev1.Pod) {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "workspace",
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
	})
	ds.report(t, &lullv1.RuntimeReport{PodUID: ds.pod.UID, State: lullv1.RuntimeServing, ActiveTurns: 1})
	waitStatus(t, ns, name, "the session runs its pod, a turn in flight", func(st lullv1.SessionStatus) bool {
		return st.PodUID == ds.pod.UID && st.Phase == lullv1.SessionRunning
	})
	ds.observeBudget(t)

	setUnschedulable(t, node, true)
	waitStatus(t, ns, name, "PinnedToNode names the claim, the volume and the node", func(st lullv1.SessionStatus) bool {
		c := meta.FindStatusCondition(st.Conditions, lullv1.ConditionPinnedToNode)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == lullv1.ReasonVolumeNodeAffinity &&
			strings.Contains(c.Message, claim) && strings.Contains(c.Message, pv.Name) && strings.Contains(c.Message, node)
	})
	eventually(t, 10*time.Second, "VolumeNodeAffinity Event", func(ctx context.Context) error {
		return hasEvent(ctx, ns, lullv1.ReasonVolumeNodeAffinity, pv.Name)
	})
	s := &lullv1.Session{}
	if err := admin.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, s); err != nil {
		t.Fatal(err)
	}
	if s.Status.Drain != nil {
		t.Fatalf("status.drain %+v; want no drain request for a pinned session", s.Status.Drain)
	}
	if err := ds.evict(t.Context()); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("eviction of the pinned pod: %v; want 429 from its budget", err)
	}

	setUnschedulable(t, node, false)
	waitStatus(t, ns, name, "PinnedToNode removed once uncordoned", func(st lullv1.SessionStatus) bool {
		return meta.FindStatusCondition(st.Conditions, lullv1.ConditionPinnedToNode) == nil && st.Drain == nil
	})
}
