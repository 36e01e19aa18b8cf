package session

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"lull.dev/lull/internal/render"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/render/rendertest"
)

// A StatefulSet write must make the StatefulSet name the template's current
// files ConfigMap, and mark that ConfigMap referenced first, even when the
// cache still shows the StatefulSet as it was before this controller's own
// last write.
//
//  1. The template's files are A; the session's StatefulSet names
//     agent-files-<A>.
//  2. The template's files change to B; the reconciler points the
//     StatefulSet at agent-files-<B> (the write lands on the API server).
//  3. Before the cache shows that write, the template changes again: files
//     back to A and a new image (A').
//  4. The reconciler reads the StatefulSet from the cache (still naming A),
//     renders A' (naming A): "already names A", so no referenced-at mark,
//     and a merge patch computed against the stale copy, which leaves the
//     volumes out (equal in the stale copy and in A').
//
// The live StatefulSet then names B while its spec-hash says A': the pod
// boots with files the template no longer has, and nothing ever corrects it
// (every later reconcile finds the spec-hash equal). And A was pointed at
// without the mark that closes the race with the sweeper (rule 8).
func TestStatefulSetNamesCurrentFilesWhenTheCacheLagsOwnWrite(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s := &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice", UID: "session-uid"},
		Spec: lullv1.SessionSpec{TemplateRef: lullv1.TemplateReference{Name: "agent"}}}
	owned := func(sts *appsv1.StatefulSet) *appsv1.StatefulSet {
		sts.OwnerReferences = []metav1.OwnerReference{{APIVersion: lullv1.GroupVersion.String(), Kind: "Session", Name: s.Name, UID: s.UID, Controller: ptrTo(true)}}
		return sts
	}
	tA := rendertest.FilesTemplate(rendertest.Text("config.yaml", "a"))
	tB := rendertest.FilesTemplate(rendertest.Text("config.yaml", "b"))
	tA2 := rendertest.FilesTemplate(rendertest.Text("config.yaml", "a"))
	tA2.Spec.Template.Spec.Containers[0].Image = "example.com/agent:3"
	renderSet := func(tmpl *lullv1.SessionTemplate) *appsv1.StatefulSet {
		t.Helper()
		sts, err := render.StatefulSet(s, tmpl, 1)
		if err != nil {
			t.Fatal(err)
		}
		return owned(sts)
	}
	cmA, _ := render.FilesConfigMap(tA)
	cmB, _ := render.FilesConfigMap(tB)
	stale := renderSet(tA) // what the cache shows
	live := renderSet(tB)  // what the API server holds: this controller's last write
	live.ResourceVersion = ""

	var readLive atomic.Bool
	c := filesClient(t, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
			if sts, ok := o.(*appsv1.StatefulSet); ok && !readLive.Load() {
				if err := c.Get(ctx, key, o, opts...); err != nil {
					return err
				}
				// The cache's copy: the version before the last write.
				rv := sts.ResourceVersion
				stale.DeepCopyInto(sts)
				sts.ResourceVersion = rv
				return nil
			}
			return c.Get(ctx, key, o, opts...)
		},
	}, cmA.DeepCopy(), cmB.DeepCopy(), live)
	before := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cmA), before); err != nil {
		t.Fatal(err)
	}

	if _, _, err := ensureStatefulSet(ctx, c, liveReader{c: c, live: &readLive}, s, tA2, 1, "", now, &restoreStreaks{}); err != nil {
		t.Fatal(err)
	}
	readLive.Store(true)

	got := &appsv1.StatefulSet{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(live), got); err != nil {
		t.Fatal(err)
	}
	if name := filesConfigMapOf(got); name != cmA.Name {
		t.Errorf("the StatefulSet names %s after the write, want %s (template's files): its pod would boot with files the template no longer has, "+
			"and its spec-hash %s says it is up to date", name, cmA.Name, got.Annotations[render.AnnotationSpecHash])
	}
	after := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cmA), after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion == before.ResourceVersion || after.Annotations[lullv1.AnnotationFilesReferencedAt] == "" {
		t.Errorf("ConfigMap %s not marked referenced (resourceVersion %s -> %s) before the StatefulSet was pointed back at it: "+
			"a sweeper that judged it unneeded can still delete it", cmA.Name, before.ResourceVersion, after.ResourceVersion)
	}
}
