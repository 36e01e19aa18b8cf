package runtimesdk

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
)

// TestKubeSession drives kubeSession against controller-runtime's fake
// client: the watch is scoped to the one Session by a name field selector
// and starts at the given resourceVersion with bookmarks and the given
// timeout, nothing ever lists, and a status
// patch changes status.runtime and nothing else.
func TestKubeSession(t *testing.T) {
	scheme := kruntime.NewScheme()
	if err := lullv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	session := &lullv1.Session{
		ObjectMeta: metav1.ObjectMeta{Name: "s1", Namespace: "ns", Labels: map[string]string{"team": "a"}},
		Spec:       lullv1.SessionSpec{TemplateRef: lullv1.TemplateReference{Name: "tpl"}},
		Status: lullv1.SessionStatus{
			Phase: lullv1.SessionDraining, PodUID: testPod,
			Drain: &lullv1.DrainRequest{RequestID: req1, PodUID: testPod, Reason: lullv1.DrainReasonUpdate},
		},
	}
	var watchOpts client.ListOptions
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(session).WithStatusSubresource(&lullv1.Session{}).
		WithInterceptorFuncs(interceptor.Funcs{
			List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
				t.Error("the runtime listed sessions")
				return errors.New("forbidden")
			},
			Watch: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
				watchOpts.ApplyOptions(opts)
				return c.Watch(ctx, list, opts...)
			},
		}).Build()
	k := &kubeSession{c: c, key: types.NamespacedName{Namespace: "ns", Name: "s1"}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	got, err := k.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w, err := k.Watch(ctx, got.ResourceVersion, 45*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	raw := watchOpts.AsListOptions()
	if watchOpts.Namespace != "ns" || raw.FieldSelector != "metadata.name=s1" || raw.ResourceVersion != got.ResourceVersion || !raw.AllowWatchBookmarks {
		t.Errorf("watch options: namespace %q, %+v; want ns, metadata.name=s1 from resourceVersion %s, with bookmarks", watchOpts.Namespace, raw, got.ResourceVersion)
	}
	if ts := raw.TimeoutSeconds; ts == nil || *ts != 45*60 {
		t.Errorf("watch timeoutSeconds %v, want the 45 minutes asked for", ts)
	}

	report := &lullv1.RuntimeReport{PodUID: testPod, RequestID: req1, State: lullv1.RuntimeDrained}
	patch, err := drain.EncodeReport(report)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.PatchStatus(ctx, patch, ""); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		s, ok := ev.Object.(*lullv1.Session)
		if ev.Type != watch.Modified || !ok || s.Status.Runtime == nil || s.Status.Runtime.State != lullv1.RuntimeDrained {
			t.Errorf("watch event %s %+v, want the Session modified with the report", ev.Type, ev.Object)
		}
	case <-ctx.Done():
		t.Fatal("no watch event for the status patch")
	}

	after, err := k.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !sameReport(after.Status.Runtime, report) {
		t.Errorf("status.runtime = %+v, want %+v", after.Status.Runtime, report)
	}
	after.Status.Runtime = nil
	if after.Status.Phase != session.Status.Phase || after.Status.PodUID != testPod || after.Status.Drain == nil ||
		after.Status.Drain.RequestID != req1 || after.Labels["team"] != "a" || after.Spec != session.Spec {
		t.Errorf("the patch changed more than status.runtime: %+v", after)
	}
}
