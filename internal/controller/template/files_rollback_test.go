package template

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/controller/filesweep"
	"lull.dev/lull/internal/render"
)

// The sweeper's judgement and its delete are two steps: a template rolled
// back to files A between the sweeper's read of the templates on the API
// server and its delete of A leaves A's resourceVersion as judged, so A is
// deleted while the template names it. That is a gap, not a loss: the
// ConfigMap is content-addressed, so the template controller, which the
// delete wakes (it watches its ConfigMaps), makes A again, the same name
// and bytes; a session pointed at A marks it first and waits while it is
// missing (runtime-files.md, rule 8), and a pod that names it meanwhile
// waits for the volume as the kubelet retries it.
func TestFilesSweptInARollbackAreMadeAgain(t *testing.T) {
	filesA, filesB := filesTemplate("a"), filesTemplate("b")
	tmpl := filesTemplate("b")
	tmpl.UID = "t-1"
	a, err := render.FilesConfigMap(filesA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := render.FilesConfigMap(filesB)
	if err != nil {
		t.Fatal(err)
	}
	var rolledBack atomic.Bool
	w := newMemoryWorld(t, interceptor.Funcs{}, tmpl, a, b)
	live := interceptor.NewClient(w.c, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			err := c.List(ctx, list, opts...)
			if _, ok := list.(*lullv1.SessionTemplateList); ok && err == nil && rolledBack.CompareAndSwap(false, true) {
				// Right after the sweeper read the templates from the
				// API server: the operator rolls the template back to
				// files A.
				cur := &lullv1.SessionTemplate{}
				if err := c.Get(ctx, w.key, cur); err != nil {
					return err
				}
				cur.Spec.Files = filesA.Spec.Files
				if err := c.Update(ctx, cur); err != nil {
					return err
				}
			}
			return err
		},
	})
	sweeper := &filesweep.Reconciler{Client: w.c, APIReader: live, Clock: w.clock, Grace: time.Minute}
	pass := func() {
		t.Helper()
		if _, err := sweeper.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns"}}); err != nil {
			t.Fatal(err)
		}
	}
	pass() // first seen: settling
	w.clock.SetTime(w.clock.Now().Add(2 * time.Minute))
	pass() // A judged unneeded; the rollback lands before the delete
	if !rolledBack.Load() {
		t.Fatal("the rollback did not happen between the sweeper's read and its delete")
	}
	names := func() bool {
		cur := &lullv1.SessionTemplate{}
		if err := w.c.Get(context.Background(), w.key, cur); err != nil {
			t.Fatal(err)
		}
		return render.FilesConfigMapName(cur) == a.Name
	}
	exists := func() bool {
		return w.c.Get(context.Background(), client.ObjectKeyFromObject(a), &corev1.ConfigMap{}) == nil
	}
	if !names() || exists() {
		t.Fatalf("precondition: template names %s (%v) and it is gone (%v): the window the finding describes", a.Name, names(), !exists())
	}
	w.reconcile() // the template controller, woken by the delete
	if !exists() {
		t.Errorf("files %s, which the template names again, were not made again", a.Name)
	}
}
