package session

import (
	"context"
	"strings"
	"testing"

	"lull.dev/lull/internal/render"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/files"
)

// A template whose files ConfigMap does not exist (the template controller
// could not create it: a full quota) holds its sessions where they are: the
// StatefulSet keeps its pod template, the stale pod is not drained, Ready
// stays what the pod says, and no Event is recorded per session. The wait
// is written only once it has lasted SettleDelay; once the ConfigMap
// exists, the StatefulSet moves to it.
func TestSessionWaitsForTheTemplatesFiles(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, nil)
	ctx := context.Background()
	tmpl := &lullv1.SessionTemplate{}
	if err := w.c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "agent"}, tmpl); err != nil {
		t.Fatal(err)
	}
	tmpl.Spec.Files = &lullv1.Files{MountPath: "/etc/runtime", Items: []lullv1.FileItem{{Name: "config.yaml", Content: ptr.To("a")}}}
	if err := w.c.Update(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	before := &appsv1.StatefulSet{}
	if err := w.c.Get(ctx, w.key, before); err != nil {
		t.Fatal(err)
	}
	readyBefore := meta.FindStatusCondition(w.session().Status.Conditions, lullv1.ConditionReady)

	res, err := w.reconcile()
	if err != nil {
		t.Fatal(err)
	}
	if w.patches.Load() != 0 || res.RequeueAfter <= 0 || res.RequeueAfter > SettleDelay {
		t.Fatalf("a fresh wait: %d status patches, requeue %v; want none and a look again within %v", w.patches.Load(), res.RequeueAfter, SettleDelay)
	}

	w.clock.SetTime(t0.Add(SettleDelay + 1))
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	s := w.session()
	up := meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionUpToDate)
	if up == nil || up.Status != metav1.ConditionUnknown || up.Reason != lullv1.ReasonFilesNotReady ||
		!strings.Contains(up.Message, render.FilesConfigMapName(tmpl)) || !strings.Contains(up.Message, lullv1.ConditionFilesReady) {
		t.Errorf("UpToDate = %+v; want Unknown FilesNotReady naming the ConfigMap and the template's FilesReady", up)
	}
	if ready := meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionReady); ready != nil && ready.Reason == lullv1.ReasonFilesNotReady ||
		readyBefore != nil && (ready == nil || ready.Status != readyBefore.Status) {
		t.Errorf("Ready = %+v (was %+v); a wait for files must leave it to the pod", ready, readyBefore)
	}
	if s.Status.Drain != nil || !w.podExists() {
		t.Errorf("drain %+v, pod exists %v: a session waiting for files must not be drained", s.Status.Drain, w.podExists())
	}
	if got := w.eventReasons(); len(got) != 0 {
		t.Errorf("events %v; the template records the cause, not each session", got)
	}
	sts := &appsv1.StatefulSet{}
	if err := w.c.Get(ctx, w.key, sts); err != nil {
		t.Fatal(err)
	}
	if sts.Generation != before.Generation || filesVolumeOf(sts) != "" {
		t.Errorf("StatefulSet generation %d -> %d, files volume %q: it must not be touched", before.Generation, sts.Generation, filesVolumeOf(sts))
	}

	desired, err := render.FilesConfigMap(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := files.Create(ctx, w.c, w.c, desired); err != nil {
		t.Fatal(err)
	}
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Get(ctx, w.key, sts); err != nil {
		t.Fatal(err)
	}
	if got := filesVolumeOf(sts); got != desired.Name {
		t.Errorf("once the ConfigMap exists the StatefulSet mounts %q, want %q", got, desired.Name)
	}
	if up := meta.FindStatusCondition(w.session().Status.Conditions, lullv1.ConditionUpToDate); up != nil && up.Reason == lullv1.ReasonFilesNotReady {
		t.Errorf("UpToDate still %+v once the ConfigMap exists", up)
	}
}

func filesVolumeOf(sts *appsv1.StatefulSet) string {
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Name == lullv1.FilesVolume && v.ConfigMap != nil {
			return v.ConfigMap.Name
		}
	}
	return ""
}
