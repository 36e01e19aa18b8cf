// Package devstorage gives the local control plane dynamic volumes: the
// StorageClass lull-dev and a provisioner that serves its claims with
// directories on this host. KWOK runs no kubelet, so nothing would ever
// mount a volume; the pod runner (package podprocess) instead hands a
// runtime process the directory of its claim (see [HostPath]).
//
// The provisioner follows the contract of the Kubernetes external
// provisioner library (sigs.k8s.io/sig-storage-lib-external-provisioner):
// it creates a PersistentVolume pre-bound to the claim and leaves the
// binding to the PV controller in kube-controller-manager; when that
// controller releases a volume whose reclaim policy is Delete, the
// provisioner removes the directory and deletes the volume.
package devstorage

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

const (
	// StorageClassName is the StorageClass the provisioner serves.
	StorageClassName = "lull-dev"
	// Provisioner is the provisioner name in the StorageClass, in the
	// claims the PV controller hands over and in the volumes created.
	Provisioner = "lull.dev/dev-hostpath"
)

// Annotations of the storage API, as kube-controller-manager and the
// external provisioner library spell them.
const (
	// annDefaultClass marks the StorageClass that claims without a class
	// get.
	annDefaultClass = "storageclass.kubernetes.io/is-default-class"
	// annStorageProvisioner and its beta spelling are set on a claim by
	// the PV controller when it wants an external provisioner to provision
	// it; the value is the provisioner's name.
	annStorageProvisioner     = "volume.kubernetes.io/storage-provisioner"
	annBetaStorageProvisioner = "volume.beta.kubernetes.io/storage-provisioner"
	// annProvisionedBy names the provisioner of a dynamically provisioned
	// volume; the PV controller leaves the deletion of a volume whose
	// provisioner is not in-tree to that provisioner.
	annProvisionedBy = "pv.kubernetes.io/provisioned-by"
)

// StorageClass returns the lull-dev StorageClass.
//
// It is the default class, so that a session template's
// volumeClaimTemplates written for a production cluster, which commonly
// leave storageClassName to that cluster's default, bind unchanged on the
// local control plane (it has no other class).
//
// Its volumeBindingMode is Immediate: WaitForFirstConsumer exists to place
// a volume where the scheduler puts its pod, and here there is one KWOK
// node and the volume is a directory on the host the pod runner uses for
// every pod, so there is nothing to wait for; binding at once also lets a
// claim be checked before any pod exists.
func StorageClass() *storagev1.StorageClass {
	return &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{
			Name:        StorageClassName,
			Annotations: map[string]string{annDefaultClass: "true"},
		},
		Provisioner:          Provisioner,
		ReclaimPolicy:        ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode:    ptr.To(storagev1.VolumeBindingImmediate),
		AllowVolumeExpansion: ptr.To(false),
	}
}

// EnsureStorageClass creates the lull-dev StorageClass; one that already
// exists is left as it is (its provisioner, reclaim policy and binding mode
// cannot be changed anyway).
func EnsureStorageClass(ctx context.Context, client kubernetes.Interface) error {
	_, err := client.StorageV1().StorageClasses().Create(ctx, StorageClass(), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create StorageClass %s: %w", StorageClassName, err)
	}
	return nil
}
