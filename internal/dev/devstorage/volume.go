package devstorage

import (
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
)

// The decisions of the provisioner, apart from its I/O: which claims it
// serves, which of those it must refuse, the volume it creates for a claim,
// and which volumes it deletes.

// supportedAccessModes are the modes a volume can be claimed with. A
// directory on one host is a node-local volume, and these are the modes of
// one node, as Rancher's local-path-provisioner and the CSI hostpath
// driver offer them; a claim for ReadWriteMany or ReadOnlyMany is refused
// rather than given a volume that no cluster of more than one node could
// honour.
var supportedAccessModes = sets.New(corev1.ReadWriteOnce, corev1.ReadWriteOncePod)

// served reports whether the provisioner is to provision claim: it is
// Pending, bound to no volume, not being deleted, its class is lull-dev,
// and the provisioner the PV controller named on it, if any, is this one.
//
// The class is read as the PV controller reads it (the beta annotation
// volume.beta.kubernetes.io/storage-class first, then
// spec.storageClassName). A claim with no class is not served: the API
// server's DefaultStorageClass admission gives a new claim the default
// class (lull-dev), and the PV controller gives it retroactively to a claim
// created before there was a default; a volume of class lull-dev could not
// bind to a claim without one anyway. The provisioner annotation follows
// the external provisioner library: where the PV controller has named a
// provisioner, that name decides.
func served(claim *corev1.PersistentVolumeClaim) bool {
	if claim.Spec.VolumeName != "" || claim.DeletionTimestamp != nil {
		return false
	}
	if p := claim.Status.Phase; p != "" && p != corev1.ClaimPending {
		return false
	}
	if claimClass(claim) != StorageClassName {
		return false
	}
	name, ok := claim.Annotations[annStorageProvisioner]
	if !ok {
		name, ok = claim.Annotations[annBetaStorageProvisioner]
	}
	return !ok || name == Provisioner
}

// claimClass is the claim's StorageClass name, "" for none.
func claimClass(claim *corev1.PersistentVolumeClaim) string {
	if class, ok := claim.Annotations[corev1.BetaStorageClassAnnotation]; ok {
		return class
	}
	return ptr.Deref(claim.Spec.StorageClassName, "")
}

// refusal returns why a served claim cannot be provisioned, each reason
// naming the claim's field, or nil when it can be.
func refusal(claim *corev1.PersistentVolumeClaim) error {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	if claim.Spec.Selector != nil {
		errs = append(errs, field.Forbidden(spec.Child("selector"), "a claim selector is not supported: the provisioner creates a new volume, it does not select one"))
	}
	if ref := claim.Spec.DataSourceRef; ref != nil {
		errs = append(errs, field.Forbidden(spec.Child("dataSourceRef"), fmt.Sprintf("populating a volume from %s %s is not supported: volumes start empty", ref.Kind, ref.Name)))
	} else if src := claim.Spec.DataSource; src != nil {
		errs = append(errs, field.Forbidden(spec.Child("dataSource"), fmt.Sprintf("populating a volume from %s %s is not supported: volumes start empty", src.Kind, src.Name)))
	}
	if m := ptr.Deref(claim.Spec.VolumeMode, corev1.PersistentVolumeFilesystem); m != corev1.PersistentVolumeFilesystem {
		errs = append(errs, field.NotSupported(spec.Child("volumeMode"), m, []corev1.PersistentVolumeMode{corev1.PersistentVolumeFilesystem}))
	}
	for i, m := range claim.Spec.AccessModes {
		if !supportedAccessModes.Has(m) {
			errs = append(errs, field.NotSupported(spec.Child("accessModes").Index(i), m, sets.List(supportedAccessModes)))
		}
	}
	if q, ok := claim.Spec.Resources.Requests[corev1.ResourceStorage]; !ok || q.IsZero() {
		errs = append(errs, field.Required(spec.Child("resources", "requests").Key(string(corev1.ResourceStorage)), "the volume's capacity"))
	}
	return errs.ToAggregate()
}

// volumeName is the name of the volume provisioned for a claim: from its
// UID, so that provisioning again finds the same volume, and a claim
// deleted and created again under its name gets a new one.
func volumeName(claim *corev1.PersistentVolumeClaim) string {
	return "pvc-" + string(claim.UID)
}

// volumeFor renders the volume for a served claim whose directory is
// root/<volume name>: pre-bound to the claim (claimRef with its UID), so
// the PV controller binds the two and no other claim can take it.
func volumeFor(claim *corev1.PersistentVolumeClaim, root string) *corev1.PersistentVolume {
	name := volumeName(claim)
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annProvisionedBy: Provisioner}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: claim.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   append([]corev1.PersistentVolumeAccessMode(nil), claim.Spec.AccessModes...),
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              StorageClassName,
			VolumeMode:                    ptr.To(ptr.Deref(claim.Spec.VolumeMode, corev1.PersistentVolumeFilesystem)),
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID,
			},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: filepath.Join(root, name),
				Type: ptr.To(corev1.HostPathDirectoryOrCreate),
			}},
		},
	}
}

// deletable reports whether the provisioner is to delete pv: one it
// provisioned, Released by the PV controller (its claim is gone), with
// reclaim policy Delete, and not already being deleted. A volume with
// policy Retain is left, directory and all, for its owner to deal with.
func deletable(pv *corev1.PersistentVolume) bool {
	return pv.Annotations[annProvisionedBy] == Provisioner &&
		pv.Status.Phase == corev1.VolumeReleased &&
		pv.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimDelete &&
		pv.DeletionTimestamp == nil
}

// volumeDir returns the directory of a volume the provisioner made under
// root. It refuses a volume whose hostPath is not root/<volume name>, so
// deleting a volume never removes a directory the provisioner did not
// create.
func volumeDir(pv *corev1.PersistentVolume, root string) (string, error) {
	want := filepath.Join(root, pv.Name)
	if pv.Spec.HostPath == nil || filepath.Clean(pv.Spec.HostPath.Path) != want {
		return "", fmt.Errorf("volume %s: spec.hostPath.path is not %s, the directory the provisioner made; not removing it", pv.Name, want)
	}
	return want, nil
}
