package devstorage

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestHostPath(t *testing.T) {
	pending := claim()
	bound := claim(func(c *corev1.PersistentVolumeClaim) {
		c.Name, c.UID = "bound", "b0"
		c.Spec.VolumeName = "pvc-b0"
		c.Status.Phase = corev1.ClaimBound
	})
	stolen := claim(func(c *corev1.PersistentVolumeClaim) {
		c.Name, c.UID = "stolen", "s0"
		c.Spec.VolumeName = "pvc-b0" // bound back to another claim
		c.Status.Phase = corev1.ClaimBound
	})
	nfs := claim(func(c *corev1.PersistentVolumeClaim) {
		c.Name, c.UID = "nfs", "n0"
		c.Spec.VolumeName = "nfs"
		c.Status.Phase = corev1.ClaimBound
	})
	nfsVolume := volumeFor(nfs, "/state/volumes")
	nfsVolume.Name = "nfs"
	nfsVolume.Spec.HostPath, nfsVolume.Spec.NFS = nil, &corev1.NFSVolumeSource{Server: "nfs", Path: "/"}
	cs := fake.NewClientset(pending, bound, stolen, nfs, volumeFor(bound, "/state/volumes"), nfsVolume)

	if got, err := HostPath(t.Context(), cs, "ns", "bound"); err != nil || got != "/state/volumes/pvc-b0" {
		t.Errorf("bound claim: %q, %v; want /state/volumes/pvc-b0", got, err)
	}
	if _, err := HostPath(t.Context(), cs, "ns", pending.Name); !errors.Is(err, ErrNotBound) {
		t.Errorf("pending claim: %v, want ErrNotBound", err)
	}
	if _, err := HostPath(t.Context(), cs, "ns", "stolen"); err == nil || !strings.Contains(err.Error(), "not bound to it") {
		t.Errorf("volume bound to another claim: %v", err)
	}
	if _, err := HostPath(t.Context(), cs, "ns", "nfs"); err == nil || !strings.Contains(err.Error(), "not a hostPath volume") {
		t.Errorf("NFS volume: %v", err)
	}
	if _, err := HostPath(t.Context(), cs, "ns", "missing"); err == nil || errors.Is(err, ErrNotBound) {
		t.Errorf("missing claim: %v, want NotFound", err)
	}
}
