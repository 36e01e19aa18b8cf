package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	lullv1 "lull.dev/lull/api/v1alpha1"
	lullsession "lull.dev/lull/internal/controller/session"
)

// A template's spec.files reach the runtime under lull dev; new content is
// a new ConfigMap and a new revision, rolled out between turns, and the
// ConfigMap the old pods booted with is swept once they are gone.
func TestFilesRollout(t *testing.T) {
	withFiles := func(content string) *lullv1.Files {
		return &lullv1.Files{MountPath: "/etc/runtime", Items: []lullv1.FileItem{
			{Name: "config.yaml", Content: ptr.To(content)}, {Name: "key.der", BinaryContent: []byte{0xff, 0, 0xfe}}}}
	}
	ns, names, before := setupTemplate(t, 2, func(t *lullv1.SessionTemplate) { t.Spec.Files = withFiles("model: big\n") },
		"--turn-min=300ms", "--turn-max=1s", "--think-max=300ms")
	sees := func(uid types.UID, want string) {
		t.Helper()
		dir := env.Runner.VolumeDir(uid, lullv1.FilesVolume)
		eventually(t, 10*time.Second, fmt.Sprintf("pod %s sees config.yaml %q", uid, want), func() error {
			got, err := os.ReadFile(filepath.Join(dir, "config.yaml"))
			if err != nil {
				return err
			}
			if string(got) != want {
				return fmt.Errorf("config.yaml is %q", got)
			}
			if b, err := os.ReadFile(filepath.Join(dir, "key.der")); err != nil || string(b) != "\xff\x00\xfe" {
				return fmt.Errorf("key.der: %q, %v", b, err)
			}
			return nil
		})
	}
	for _, name := range names {
		sees(types.UID(before.Pods[name].UID), "model: big\n")
	}

	tmpl := &lullv1.SessionTemplate{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "rt"}, tmpl); err != nil {
		t.Fatal(err)
	}
	first := lullsession.FilesConfigMapName(tmpl)
	tmpl.Spec.Files = withFiles("model: small\n")
	if err := c.Update(context.Background(), tmpl); err != nil {
		t.Fatal(err)
	}
	after := replacedAll(t, ns, names, before)
	for _, name := range names {
		sees(types.UID(after.Pods[name].UID), "model: small\n")
	}
	// Once no pod mounts it, the sweeper deletes it (TestFilesSweptOnlyWhenUnneeded
	// checks it never does so earlier).
	eventually(t, 20*time.Second, "the ConfigMap the first pods booted with is swept", func() error {
		err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: first}, &corev1.ConfigMap{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("ConfigMap %s: %v", first, err)
	})
}
