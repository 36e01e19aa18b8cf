package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"lull.dev/lull/internal/render"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// A template's spec.files reach the runtime under lull dev; new content is
// a new ConfigMap and a new revision, rolled out between turns, and the
// ConfigMap the old pods booted with is swept once they are gone.
func TestFilesRollout(t *testing.T) {
	ns, names, before := setupTemplate(t, 2, func(t *lullv1.SessionTemplate) { t.Spec.Files = withFiles("model: big\n") },
		"--turn-min=300ms", "--turn-max=1s", "--think-max=300ms")
	for _, name := range names {
		sees(t, types.UID(before.Pods[name].UID), "model: big\n")
	}

	tmpl := &lullv1.SessionTemplate{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "rt"}, tmpl); err != nil {
		t.Fatal(err)
	}
	first := render.FilesConfigMapName(tmpl)
	tmpl.Spec.Files = withFiles("model: small\n")
	if err := c.Update(context.Background(), tmpl); err != nil {
		t.Fatal(err)
	}
	after := replacedAll(t, ns, names, before)
	for _, name := range names {
		sees(t, types.UID(after.Pods[name].UID), "model: small\n")
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

func withFiles(content string) *lullv1.Files {
	return &lullv1.Files{MountPath: "/etc/runtime", Items: []lullv1.FileItem{
		{Name: "config.yaml", Content: ptr.To(content)}, {Name: "key.der", BinaryContent: []byte{0xff, 0, 0xfe}}}}
}

// sees waits until the runtime of pod uid reads config.yaml = want (and
// key.der) in its files directory.
func sees(t *testing.T, uid types.UID, want string) {
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

// A full quota reported and recovered: with the namespace's ResourceQuota
// count/configmaps full, a change of a template's files cannot be
// delivered. The template says FilesReady=False (FilesRefused); the busy
// session keeps its pod, is not drained and loses no turn, and says
// FilesNotReady. Once the quota is raised, the template controller's retry
// creates the ConfigMap and the session rolls out, drained.
func TestFilesQuotaReportedAndRecovered(t *testing.T) {
	ctx := context.Background()
	ns, names, before := setupTemplate(t, 1, func(t *lullv1.SessionTemplate) { t.Spec.Files = withFiles("model: big\n") },
		"--turn-min=500ms", "--turn-max=1500ms", "--think-max=200ms")
	name := names[0]
	uid := types.UID(before.Pods[name].UID)
	eventually(t, 20*time.Second, "the session is busy", func() error { return openTurn(t, uid) })

	// The quota controller counts the namespace's ConfigMaps; allow no more.
	var cms corev1.ConfigMapList
	if err := c.List(ctx, &cms, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	count := corev1.ResourceName("count/configmaps")
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "configmaps"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{count: *resource.NewQuantity(int64(len(cms.Items)), resource.DecimalSI)}}}
	if err := c.Create(ctx, quota); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the quota controller counts the ConfigMaps", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(quota), quota); err != nil {
			return err
		}
		used, hard := quota.Status.Used[count], quota.Status.Hard[count]
		if hard.IsZero() || used.Cmp(hard) < 0 {
			return fmt.Errorf("quota status used %v hard %v", used.String(), hard.String())
		}
		return nil
	})

	tmpl := &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rt"}}
	busyBefore := finishedTurns(t, uid)
	edit(t, tmpl, func(tmpl *lullv1.SessionTemplate) { tmpl.Spec.Files = withFiles("model: small\n") })
	second := render.FilesConfigMapName(tmpl)
	eventually(t, 20*time.Second, "the template says FilesRefused naming the quota", func() error {
		got := &lullv1.SessionTemplate{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(tmpl), got); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, lullv1.ConditionFilesReady)
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != lullv1.ReasonFilesRefused || !strings.Contains(cond.Message, "exceeded quota: configmaps") {
			return fmt.Errorf("FilesReady = %+v", cond)
		}
		return nil
	})
	eventually(t, 20*time.Second, "the session says FilesNotReady", func() error {
		cond := meta.FindStatusCondition(session(t, ns, name).Status.Conditions, lullv1.ConditionUpToDate)
		if cond == nil || cond.Reason != lullv1.ReasonFilesNotReady || !strings.Contains(cond.Message, second) {
			return fmt.Errorf("UpToDate = %+v", cond)
		}
		return nil
	})
	never(t, 8*time.Second, "the session keeps its pod, undrained, while the files cannot be created", func() error {
		s := session(t, ns, name)
		if s.Status.Drain != nil {
			return fmt.Errorf("drain requested: %+v", s.Status.Drain)
		}
		if p := pod(t, ns, name); p == nil || p.UID != uid || p.DeletionTimestamp != nil {
			return fmt.Errorf("pod %v replaced or deleted", p)
		}
		return nil
	})
	eventually(t, 20*time.Second, "the session keeps finishing turns on its pod", func() error {
		if n := finishedTurns(t, uid); n <= busyBefore {
			return fmt.Errorf("%d turns finished, %d before the files changed", n, busyBefore)
		}
		return nil
	})

	edit(t, quota, func(q *corev1.ResourceQuota) { q.Spec.Hard[count] = resource.MustParse("100") })
	after := replacedAll(t, ns, names, before)
	sees(t, types.UID(after.Pods[name].UID), "model: small\n")
	if !hasEvent(t, ns, name, lullv1.ReasonDrainRequested) {
		t.Error("the session was replaced without a drain")
	}
	// The sessions move on the ConfigMap's creation; the template's status
	// follows within its write budget.
	eventually(t, 15*time.Second, "FilesReady True after the quota was raised", func() error {
		got := &lullv1.SessionTemplate{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(tmpl), got); err != nil {
			return err
		}
		if cond := meta.FindStatusCondition(got.Status.Conditions, lullv1.ConditionFilesReady); cond == nil || cond.Status != metav1.ConditionTrue {
			return fmt.Errorf("FilesReady = %+v", cond)
		}
		return nil
	})
}

// finishedTurns counts the journaled turns that ended on pod uid.
func finishedTurns(t *testing.T, uid types.UID) int {
	n := 0
	for _, tr := range turnsOn(t, uid) {
		if !tr.Ended.IsZero() {
			n++
		}
	}
	return n
}
