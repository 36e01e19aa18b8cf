package devcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"lull.dev/lull/internal/dev/devstorage"
)

// TestStorageProvisioning runs the lull-dev provisioner against the PV
// controller of kube-controller-manager: a claim of class lull-dev, and a
// claim that names no class (it gets the default), are bound to new
// directories; a claim the provisioner cannot serve gets a Warning Event
// and stays Pending; deleting a claim deletes its volume and directory.
func TestStorageProvisioning(t *testing.T) {
	c := startCluster(t, "")
	ctx := t.Context()
	client := kubernetes.NewForConfigOrDie(c.Config)
	if err := devstorage.EnsureStorageClass(ctx, client); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	p, err := devstorage.New(devstorage.Options{Config: c.Config, Dir: root, Log: logWriter{t, "provisioner: "}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })

	claims := client.CoreV1().PersistentVolumeClaims("default")
	newClaim := func(name string, class *string, mode corev1.PersistentVolumeMode) {
		t.Helper()
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{
				StorageClassName: class,
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				VolumeMode:       ptr.To(mode),
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
		if _, err := claims.Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create claim %s: %v", name, err)
		}
	}
	t0 := time.Now()
	newClaim("workspace", ptr.To(devstorage.StorageClassName), corev1.PersistentVolumeFilesystem)
	newClaim("unclassed", nil, corev1.PersistentVolumeFilesystem)
	newClaim("block", ptr.To(devstorage.StorageClassName), corev1.PersistentVolumeBlock)

	dirs := map[string]string{}
	for _, name := range []string{"workspace", "unclassed"} {
		eventually(t, 30*time.Second, "claim "+name+" Bound", func(ctx context.Context) error {
			pvc, err := claims.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if pvc.Status.Phase != corev1.ClaimBound {
				return fmt.Errorf("phase %q", pvc.Status.Phase)
			}
			if got := ptr.Deref(pvc.Spec.StorageClassName, ""); got != devstorage.StorageClassName {
				return fmt.Errorf("bound with class %q", got)
			}
			dirs[name], err = devstorage.HostPath(ctx, client, "default", name)
			return err
		})
		t.Logf("claim %s Bound, directory %s (%.1fs after create)", name, dirs[name], time.Since(t0).Seconds())
		if filepath.Dir(dirs[name]) != root {
			t.Errorf("claim %s: directory %s is not under %s", name, dirs[name], root)
		}
		if err := os.WriteFile(filepath.Join(dirs[name], "notes.md"), []byte("turn 1\n"), 0o644); err != nil {
			t.Errorf("write into claim %s's directory: %v", name, err)
		}
	}

	eventually(t, 10*time.Second, "ProvisioningFailed event on claim block", func(ctx context.Context) error {
		list, err := client.EventsV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=block"})
		if err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Reason == devstorage.ReasonProvisioningFailed && e.Type == corev1.EventTypeWarning && strings.Contains(e.Note, "spec.volumeMode") {
				return nil
			}
		}
		return fmt.Errorf("%d events, none a ProvisioningFailed Warning naming spec.volumeMode", len(list.Items))
	})
	if pvc, err := claims.Get(ctx, "block", metav1.GetOptions{}); err != nil || pvc.Status.Phase != corev1.ClaimPending || pvc.Spec.VolumeName != "" {
		t.Errorf("claim block: %v, want it Pending without a volume", err)
	}
	if _, err := devstorage.HostPath(ctx, client, "default", "block"); !errors.Is(err, devstorage.ErrNotBound) {
		t.Errorf("HostPath of a Pending claim: %v, want ErrNotBound", err)
	}

	workspace, err := claims.Get(ctx, "workspace", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	if err := claims.Delete(ctx, "workspace", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "volume of deleted claim workspace deleted", func(ctx context.Context) error {
		pv, err := client.CoreV1().PersistentVolumes().Get(ctx, workspace.Spec.VolumeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("volume %s: phase %q, finalizers %v", pv.Name, pv.Status.Phase, pv.Finalizers)
	})
	t.Logf("volume %s deleted %.1fs after its claim", workspace.Spec.VolumeName, time.Since(t0).Seconds())
	if _, err := os.Stat(dirs["workspace"]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory of the deleted volume: %v, want it removed", err)
	}
	if b, err := os.ReadFile(filepath.Join(dirs["unclassed"], "notes.md")); err != nil || string(b) != "turn 1\n" {
		t.Errorf("the other claim's file: %q, %v", b, err)
	}
}
