package filesweep

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/testenv"
)

// A namespace without files ConfigMaps is passed without reading its
// StatefulSets and pods: with thousands of sessions those lists were half
// the controller's CPU during a rollout.
func TestPassWithoutCandidatesListsNothingElse(t *testing.T) {
	scheme := testenv.Scheme()
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
	if res.RequeueAfter != 0 {
		t.Errorf("next pass after %s, want none: a namespace without files ConfigMaps is forgotten", res.RequeueAfter)
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

// The kept counts behind lull_files_configmaps_kept are held per
// namespace; a namespace whose last files ConfigMap is gone (or that is
// gone itself) is dropped, not held at zero for the life of the process.
func TestKeptCountsForgetANamespaceWithoutFilesConfigMaps(t *testing.T) {
	scheme := testenv.Scheme()
	const ns = "kept-counts-forget"
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t-files-x",
		Labels: map[string]string{lullv1.LabelFiles: "x", lullv1.LabelTemplate: "t"}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(cm).Build()
	r := &Reconciler{Client: c}
	pass := func() {
		t.Helper()
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	held := func() bool {
		keptCounts.Lock()
		defer keptCounts.Unlock()
		_, ok := keptCounts.byNamespace[ns]
		return ok
	}
	pass()
	if !held() {
		t.Fatal("precondition: the pass's counts of the namespace are held")
	}
	if err := c.Delete(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	pass()
	if held() {
		t.Error("the counts of a namespace without files ConfigMaps are still held")
	}
}

// A files ConfigMap that only a pod lull does not own mounts (so the cache,
// which holds only lull's pods, finds nothing naming it) is kept by the
// judgement on the API server. That judgement stands for Interval: the
// passes in between (one a second while a rollout changes StatefulSets
// and pods) do not list every template, StatefulSet and pod of the
// namespace again. Once the pod is gone, the ConfigMap is swept within one
// Interval more.
func TestForeignReferenceIsJudgedLiveOncePerInterval(t *testing.T) {
	scheme := testenv.Scheme()
	old := template("t", "old")
	cm := filesOf(old)
	cm.ResourceVersion = ""
	foreign := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "debug-copy"}, Spec: withVolume(cmVolume(cm.Name))}
	// The cache holds the candidate and none of the pods; the API server
	// holds the foreign pod too.
	cache := fake.NewClientBuilder().WithScheme(scheme).WithObjects(cm.DeepCopy()).Build()
	var liveLists int
	live := fake.NewClientBuilder().WithScheme(scheme).WithObjects(cm.DeepCopy(), foreign).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*corev1.PodList); ok {
				liveLists++
			}
			return c.List(ctx, list, opts...)
		}}).Build()
	clock := clocktesting.NewFakePassiveClock(t0)
	r := &Reconciler{Client: cache, APIReader: live, Clock: clock, Interval: time.Minute, Grace: time.Minute}
	pass := func(at time.Time) {
		t.Helper()
		clock.SetTime(at)
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns"}}); err != nil {
			t.Fatal(err)
		}
	}
	exists := func() bool {
		return cache.Get(context.Background(), client.ObjectKeyFromObject(&cm), &corev1.ConfigMap{}) == nil
	}
	pass(t0)                       // first seen: settling
	pass(t0.Add(61 * time.Second)) // settled: the cache finds nothing naming it, the API server the pod
	if liveLists != 1 || !exists() {
		t.Fatalf("after the grace: %d live pod lists, ConfigMap kept %v; want 1 and kept (the foreign pod mounts it)", liveLists, exists())
	}
	for i := range 30 { // a rollout's passes, one a second
		pass(t0.Add(62*time.Second + time.Duration(i)*time.Second))
	}
	if liveLists != 1 {
		t.Errorf("%d live pod lists in 30 passes within the interval; want the one judgement standing", liveLists-1)
	}
	pass(t0.Add(122 * time.Second)) // an interval after the judgement: judged again
	if liveLists != 2 || !exists() {
		t.Errorf("an interval later: %d live pod lists, kept %v; want a second judgement, still kept", liveLists, exists())
	}
	if err := live.Delete(context.Background(), foreign); err != nil {
		t.Fatal(err)
	}
	pass(t0.Add(183 * time.Second))
	if exists() {
		t.Error("the ConfigMap is still there an interval after the foreign pod that mounted it went")
	}
}
