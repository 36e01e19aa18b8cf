package devstorage

import (
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// claim is a Pending claim of class lull-dev for 1Gi, ReadWriteOnce, as
// the PV controller leaves it for an external provisioner.
func claim(mutate ...func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "workspace-s-0", UID: "0b5c",
			Annotations: map[string]string{annStorageProvisioner: Provisioner, annBetaStorageProvisioner: Provisioner},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(StorageClassName),
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending},
	}
	for _, m := range mutate {
		m(c)
	}
	return c
}

func TestServed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*corev1.PersistentVolumeClaim)
		want   bool
	}{
		{"handed over by the PV controller", func(*corev1.PersistentVolumeClaim) {}, true},
		{"class lull-dev, before the PV controller names a provisioner", func(c *corev1.PersistentVolumeClaim) { c.Annotations = nil }, true},
		{"only the beta provisioner annotation", func(c *corev1.PersistentVolumeClaim) { delete(c.Annotations, annStorageProvisioner) }, true},
		{"phase not yet set", func(c *corev1.PersistentVolumeClaim) { c.Status.Phase = "" }, true},
		{"class from the beta annotation", func(c *corev1.PersistentVolumeClaim) {
			c.Spec.StorageClassName = nil
			c.Annotations[corev1.BetaStorageClassAnnotation] = StorageClassName
		}, true},
		{"beta class annotation wins over spec", func(c *corev1.PersistentVolumeClaim) {
			c.Annotations[corev1.BetaStorageClassAnnotation] = "other"
		}, false},
		{"another provisioner named", func(c *corev1.PersistentVolumeClaim) {
			c.Annotations[annStorageProvisioner] = "ebs.csi.aws.com"
		}, false},
		{"another class", func(c *corev1.PersistentVolumeClaim) {
			c.Spec.StorageClassName = ptr.To("standard")
			c.Annotations = nil
		}, false},
		{"explicitly no class", func(c *corev1.PersistentVolumeClaim) { c.Spec.StorageClassName = ptr.To(""); c.Annotations = nil }, false},
		{"no class yet (admission or the PV controller sets the default)", func(c *corev1.PersistentVolumeClaim) {
			c.Spec.StorageClassName = nil
			c.Annotations = nil
		}, false},
		{"bound", func(c *corev1.PersistentVolumeClaim) {
			c.Spec.VolumeName = "pvc-0b5c"
			c.Status.Phase = corev1.ClaimBound
		}, false},
		{"volume named, not yet bound", func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeName = "static" }, false},
		{"lost", func(c *corev1.PersistentVolumeClaim) { c.Status.Phase = corev1.ClaimLost }, false},
		{"being deleted", func(c *corev1.PersistentVolumeClaim) { c.DeletionTimestamp = ptr.To(metav1.Now()) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := served(claim(tc.mutate)); got != tc.want {
				t.Errorf("served = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRefusal(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*corev1.PersistentVolumeClaim)
		want   []string // parts of the error; none means no refusal
	}{
		{"ReadWriteOnce filesystem", func(*corev1.PersistentVolumeClaim) {}, nil},
		{"ReadWriteOncePod, volume mode Filesystem", func(c *corev1.PersistentVolumeClaim) {
			c.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}
			c.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeFilesystem)
		}, nil},
		{"selector", func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"disk": "fast"}}
		}, []string{"spec.selector", "not supported"}},
		{"block", func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeBlock) }, []string{"spec.volumeMode", `"Block"`, `"Filesystem"`}},
		{"ReadWriteMany", func(c *corev1.PersistentVolumeClaim) {
			c.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadWriteMany}
		}, []string{"spec.accessModes[1]", `"ReadWriteMany"`, `"ReadWriteOnce"`}},
		{"ReadOnlyMany", func(c *corev1.PersistentVolumeClaim) {
			c.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany}
		}, []string{"spec.accessModes[0]", `"ReadOnlyMany"`}},
		{"snapshot source", func(c *corev1.PersistentVolumeClaim) {
			c.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "VolumeSnapshot", Name: "snap"}
			c.Spec.DataSourceRef = &corev1.TypedObjectReference{Kind: "VolumeSnapshot", Name: "snap"}
		}, []string{"spec.dataSourceRef", "VolumeSnapshot snap"}},
		{"clone source", func(c *corev1.PersistentVolumeClaim) {
			c.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "other"}
		}, []string{"spec.dataSource:", "PersistentVolumeClaim other"}},
		{"no storage request", func(c *corev1.PersistentVolumeClaim) { c.Spec.Resources.Requests = nil }, []string{"spec.resources.requests[storage]", "Required"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := refusal(claim(tc.mutate))
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("not refused, want an error with %q", tc.want)
			}
			for _, part := range tc.want {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("error %q does not contain %q", err, part)
				}
			}
		})
	}
}

func TestVolumeFor(t *testing.T) {
	c := claim(func(c *corev1.PersistentVolumeClaim) {
		c.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}
		c.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("5Gi")
	})
	root := "/state/volumes"
	want := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-0b5c", Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": "lull.dev/dev-hostpath"}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("5Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              "lull-dev",
			VolumeMode:                    ptr.To(corev1.PersistentVolumeFilesystem),
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: "ns", Name: "workspace-s-0", UID: "0b5c"},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: "/state/volumes/pvc-0b5c", Type: ptr.To(corev1.HostPathDirectoryOrCreate),
			}},
		},
	}
	got := volumeFor(c, root)
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("volumeFor:\n got %+v\nwant %+v", got, want)
	}
	// The volume does not share the claim's slices.
	got.Spec.AccessModes[0] = corev1.ReadOnlyMany
	if c.Spec.AccessModes[0] != corev1.ReadWriteOncePod {
		t.Error("volumeFor aliases the claim's access modes")
	}
	if d, err := volumeDir(want, root); err != nil || d != filepath.Join(root, "pvc-0b5c") {
		t.Errorf("volumeDir = %q, %v", d, err)
	}
}

func TestDeletable(t *testing.T) {
	released := func(mutate ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
		pv := volumeFor(claim(), "/state/volumes")
		pv.Status.Phase = corev1.VolumeReleased
		for _, m := range mutate {
			m(pv)
		}
		return pv
	}
	for _, tc := range []struct {
		name string
		pv   *corev1.PersistentVolume
		want bool
	}{
		{"released, Delete", released(), true},
		{"bound", released(func(pv *corev1.PersistentVolume) { pv.Status.Phase = corev1.VolumeBound }), false},
		{"available", released(func(pv *corev1.PersistentVolume) { pv.Status.Phase = corev1.VolumeAvailable }), false},
		{"Retain", released(func(pv *corev1.PersistentVolume) {
			pv.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRetain
		}), false},
		{"another provisioner's", released(func(pv *corev1.PersistentVolume) { pv.Annotations[annProvisionedBy] = "other" }), false},
		{"static volume", released(func(pv *corev1.PersistentVolume) { pv.Annotations = nil }), false},
		{"being deleted", released(func(pv *corev1.PersistentVolume) { pv.DeletionTimestamp = ptr.To(metav1.Now()) }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := deletable(tc.pv); got != tc.want {
				t.Errorf("deletable = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestVolumeDirRefusesForeignPaths(t *testing.T) {
	for _, path := range []string{"/home/user", "/state/volumes", "/state/volumes/pvc-other", "/state/volumes/pvc-0b5c/../../etc"} {
		pv := volumeFor(claim(), "/state/volumes")
		pv.Spec.HostPath.Path = path
		if d, err := volumeDir(pv, "/state/volumes"); err == nil {
			t.Errorf("hostPath %s: volumeDir = %q, want an error", path, d)
		}
	}
	pv := volumeFor(claim(), "/state/volumes")
	pv.Spec.HostPath = nil
	pv.Spec.NFS = &corev1.NFSVolumeSource{Server: "nfs", Path: "/"}
	if _, err := volumeDir(pv, "/state/volumes"); err == nil {
		t.Error("NFS volume: volumeDir gave a directory")
	}
}
