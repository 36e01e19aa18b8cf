package filesweep

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// A namespace without files ConfigMaps is passed without reading its
// StatefulSets and pods: with thousands of sessions those lists were half
// the controller's CPU during a rollout.
func TestPassWithoutCandidatesListsNothingElse(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := lullv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	listed := map[string]int{}
	count := interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		switch list.(type) {
		case *corev1.ConfigMapList:
			listed["configmaps"]++
		case *appsv1.StatefulSetList:
			listed["statefulsets"]++
		case *corev1.PodList:
			listed["pods"]++
		case *lullv1.SessionTemplateList:
			listed["templates"]++
		}
		return c.List(ctx, list, opts...)
	}}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(sts).WithInterceptorFuncs(count).Build()
	r := &Reconciler{Client: c, Interval: time.Minute}

	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns"}})
	if err != nil {
		t.Fatal(err)
	}
	if listed["configmaps"] != 1 || listed["statefulsets"] != 0 || listed["pods"] != 0 || listed["templates"] != 0 {
		t.Errorf("lists = %v, want only the files ConfigMaps", listed)
	}
	if res.RequeueAfter != time.Minute {
		t.Errorf("next pass after %s, want the safety pass's interval (1m)", res.RequeueAfter)
	}

	// With a candidate, the pass reads what its judgement needs.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "t-files-x",
		Labels: map[string]string{lullv1.LabelFiles: "x", lullv1.LabelTemplate: "t"}}}
	if err := c.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns"}}); err != nil {
		t.Fatal(err)
	}
	if listed["statefulsets"] != 1 || listed["pods"] != 1 || listed["templates"] != 1 {
		t.Errorf("lists = %v, want one of templates, StatefulSets and pods once there is a candidate", listed)
	}

	// Once the namespace's last candidate is gone, what was observed of it
	// is forgotten.
	if len(r.seen) != 1 {
		t.Fatalf("observed %d ConfigMaps, want 1", len(r.seen))
	}
	if err := c.Delete(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns"}}); err != nil {
		t.Fatal(err)
	}
	if len(r.seen) != 0 {
		t.Errorf("still remembers %d ConfigMaps of a namespace that has none", len(r.seen))
	}
}

// Every watched event enqueues its namespace's pass after the delay, so
// the events of that time share one pass.
func TestEventsEnqueueTheirNamespaceAfterTheDelay(t *testing.T) {
	q := &recordingQueue{}
	h := passAfter(2 * time.Second)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p"}}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "s"}}
	ctx := context.Background()
	h.Create(ctx, event.CreateEvent{Object: sts}, q)
	h.Update(ctx, event.UpdateEvent{ObjectOld: sts, ObjectNew: sts}, q)
	h.Delete(ctx, event.DeleteEvent{Object: pod}, q)
	h.Generic(ctx, event.GenericEvent{Object: pod}, q)
	want := []string{"b", "b", "a", "a"}
	if len(q.added) != len(want) {
		t.Fatalf("added %v, want namespaces %v", q.added, want)
	}
	for i, a := range q.added {
		if a.req.Namespace != want[i] || a.req.Name != "" || a.after != 2*time.Second {
			t.Errorf("add %d = %+v after %s, want namespace %q after 2s", i, a.req, a.after, want[i])
		}
	}
}

type added struct {
	req   reconcile.Request
	after time.Duration
}

// recordingQueue records AddAfter; any other use panics (nil embedded).
type recordingQueue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	added []added
}

func (q *recordingQueue) AddAfter(r reconcile.Request, d time.Duration) {
	q.added = append(q.added, added{r, d})
}
