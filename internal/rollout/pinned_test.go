package rollout

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func pinNode(name, zone string, cordoned bool) corev1.Node {
	return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		corev1.LabelHostname: name, corev1.LabelTopologyZone: zone}}, Spec: corev1.NodeSpec{Unschedulable: cordoned}}
}

func affinityPV(name, key string, values ...string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
		NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}}}}}}}}
}

func TestPinnedTo(t *testing.T) {
	a, b, c := pinNode("a", "z1", true), pinNode("b", "z1", false), pinNode("c", "z2", false)
	bCordoned := pinNode("b", "z1", true)
	cases := []struct {
		name    string
		volumes []BoundVolume
		nodes   []corev1.Node
		pinned  bool
	}{
		{"a local volume's hostname affinity pins the pod", []BoundVolume{{"ws-s", affinityPV("pv-local", corev1.LabelHostname, "a")}}, []corev1.Node{a, b, c}, true},
		{"a zonal volume with another schedulable node in its zone does not", []BoundVolume{{"ws-s", affinityPV("pv-zonal", corev1.LabelTopologyZone, "z1")}}, []corev1.Node{a, b, c}, false},
		{"a zonal volume whose zone's other node is cordoned too pins", []BoundVolume{{"ws-s", affinityPV("pv-zonal", corev1.LabelTopologyZone, "z1")}}, []corev1.Node{a, bCordoned, c}, true},
		{"a volume with no node affinity does not", []BoundVolume{{"ws-s", &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-net"}}}}, []corev1.Node{a}, false},
		{"an unbound claim does not", []BoundVolume{{"ws-s", nil}}, []corev1.Node{a}, false},
		{"an affinity that does not match the pod's node is not judged", []BoundVolume{{"ws-s", affinityPV("pv-local", corev1.LabelHostname, "c")}}, []corev1.Node{a, b, c}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := PinnedTo(&a, tc.volumes, tc.nodes)
			if ok != tc.pinned {
				t.Fatalf("pinned = %v (%+v), want %v", ok, p, tc.pinned)
			}
			if ok && (p.Claim != "ws-s" || p.Node != "a" || p.Volume == "") {
				t.Fatalf("pin %+v does not name the claim, volume and node", p)
			}
		})
	}
}
