package devstorage

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func TestEnsureStorageClass(t *testing.T) {
	cs := fake.NewClientset()
	for range 2 { // the second time finds it
		if err := EnsureStorageClass(t.Context(), cs); err != nil {
			t.Fatal(err)
		}
	}
	sc, err := cs.StorageV1().StorageClasses().Get(t.Context(), "lull-dev", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sc.Provisioner != "lull.dev/dev-hostpath" {
		t.Errorf("provisioner %q", sc.Provisioner)
	}
	if sc.Annotations["storageclass.kubernetes.io/is-default-class"] != "true" {
		t.Errorf("not the default class: annotations %v", sc.Annotations)
	}
	if ptr.Deref(sc.ReclaimPolicy, "") != corev1.PersistentVolumeReclaimDelete {
		t.Errorf("reclaimPolicy %v", sc.ReclaimPolicy)
	}
	if ptr.Deref(sc.VolumeBindingMode, "") != storagev1.VolumeBindingImmediate {
		t.Errorf("volumeBindingMode %v", sc.VolumeBindingMode)
	}
	if sc.AllowVolumeExpansion == nil || *sc.AllowVolumeExpansion {
		t.Errorf("allowVolumeExpansion %v, want false", sc.AllowVolumeExpansion)
	}
}
