package devstorage

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ErrNotBound is returned by HostPath for a claim that is not bound to a
// volume yet; the caller may try again once it is.
var ErrNotBound = errors.New("claim is not bound to a volume yet")

// HostPath returns the host directory of the volume bound to the claim
// namespace/claimName: what a kubelet would mount for a pod that uses the
// claim. It fails with ErrNotBound while the claim is not Bound, and with
// an error naming the volume when the volume is not bound back to this
// claim or is not a hostPath volume.
func HostPath(ctx context.Context, client kubernetes.Interface, namespace, claimName string) (string, error) {
	claim, err := client.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, claimName, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if claim.Status.Phase != corev1.ClaimBound || claim.Spec.VolumeName == "" {
		return "", fmt.Errorf("claim %s/%s (phase %q): %w", namespace, claimName, claim.Status.Phase, ErrNotBound)
	}
	pv, err := client.CoreV1().PersistentVolumes().Get(ctx, claim.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("claim %s/%s: %w", namespace, claimName, err)
	}
	if ref := pv.Spec.ClaimRef; ref == nil || ref.UID != claim.UID {
		return "", fmt.Errorf("claim %s/%s: volume %s is not bound to it", namespace, claimName, pv.Name)
	}
	if pv.Spec.HostPath == nil {
		return "", fmt.Errorf("claim %s/%s: volume %s is not a hostPath volume (class %q)", namespace, claimName, pv.Name, pv.Spec.StorageClassName)
	}
	return pv.Spec.HostPath.Path, nil
}
