package template

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"lull.dev/lull/internal/render"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/testenv"
	"lull.dev/lull/internal/files"
	"lull.dev/lull/internal/index"
)

func TestFilesRetryAfter(t *testing.T) {
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 9: 256 * time.Second, 10: 5 * time.Minute, 1000: 5 * time.Minute} {
		if got := FilesRetryAfter(n); got != want {
			t.Errorf("FilesRetryAfter(%d) = %v, want %v", n, got, want)
		}
	}
}

func filesTemplate(content string) *lullv1.SessionTemplate {
	return &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "agent", Generation: 2},
		Spec: lullv1.SessionTemplateSpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: lullv1.RuntimeContainerName, Image: "i:1"}}}},
			Files:    &lullv1.Files{MountPath: "/etc/runtime", Items: []lullv1.FileItem{{Name: "config.yaml", Content: ptr.To(content)}}}}}
}

func TestFilesCondition(t *testing.T) {
	tmpl := filesTemplate("a")
	name := render.FilesConfigMapName(tmpl)
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	quota := apierrors.NewForbidden(corev1.Resource("configmaps"), name, errors.New("exceeded quota: team-quota, requested: count/configmaps=1, used: count/configmaps=4, limited: count/configmaps=4"))
	policy := apierrors.NewForbidden(corev1.Resource("configmaps"), name, errors.New("ValidatingAdmissionPolicy 'no-configmaps' with binding 'b' denied request: ConfigMaps are managed by GitOps"))
	created := FilesCondition(tmpl, name, true, nil, time.Time{}, nil)
	for _, tc := range []struct {
		what          string
		created       bool
		err           error
		prev          *metav1.Condition
		status        metav1.ConditionStatus
		reason        string
		wantInMessage []string
	}{
		{"created", true, nil, nil, metav1.ConditionTrue, lullv1.ReasonCreated, []string{name}},
		{"found", false, nil, nil, metav1.ConditionTrue, lullv1.ReasonPresent, []string{name}},
		{"found after creating it: keeps Created", false, nil, &created, metav1.ConditionTrue, lullv1.ReasonCreated, []string{name}},
		{"quota", false, fmt.Errorf("create: %w", quota), nil, metav1.ConditionFalse, lullv1.ReasonFilesRefused,
			[]string{name, "exceeded quota: team-quota", "raise that ResourceQuota's count/configmaps", "2026-12-01T10:00:00Z"}},
		{"admission policy", false, policy, nil, metav1.ConditionFalse, lullv1.ReasonFilesRefused,
			[]string{name, "ConfigMaps are managed by GitOps", "admission policy or webhook", lullv1.LabelFiles}},
		{"conflict", false, files.Conflict{Name: name, Why: "holds other content than spec.files"}, nil, metav1.ConditionFalse, lullv1.ReasonFilesConflict,
			[]string{name, "holds other content", "delete or rename", "2026-12-01T10:00:00Z"}},
		{"invalid", false, filesInvalid{errors.New("spec.files.items: Too long")}, nil, metav1.ConditionFalse, lullv1.ReasonFilesInvalid,
			[]string{"spec.files.items", "fix spec.files"}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			c := FilesCondition(tmpl, name, tc.created, tc.err, at, tc.prev)
			if c.Type != lullv1.ConditionFilesReady || c.Status != tc.status || c.Reason != tc.reason || c.ObservedGeneration != 2 {
				t.Errorf("condition %+v; want %s %s at generation 2", c, tc.status, tc.reason)
			}
			for _, w := range tc.wantInMessage {
				if !strings.Contains(c.Message, w) {
					t.Errorf("message %q does not contain %q", c.Message, w)
				}
			}
		})
	}
	if transient(quota) || transient(files.Conflict{}) || !transient(apierrors.NewServiceUnavailable("etcd")) || transient(nil) {
		t.Error("transient: a refusal or conflict is not transient, a 503 is, nil is not")
	}
}

func TestFilesEvent(t *testing.T) {
	st := func(status metav1.ConditionStatus, reason string) lullv1.SessionTemplateStatus {
		if status == "" {
			return lullv1.SessionTemplateStatus{}
		}
		return lullv1.SessionTemplateStatus{Conditions: []metav1.Condition{{Type: lullv1.ConditionFilesReady, Status: status, Reason: reason}}}
	}
	for _, tc := range []struct {
		what          string
		before, after lullv1.SessionTemplateStatus
		event         bool
	}{
		{"first refusal", st("", ""), st(metav1.ConditionFalse, lullv1.ReasonFilesRefused), true},
		{"True to refused", st(metav1.ConditionTrue, lullv1.ReasonCreated), st(metav1.ConditionFalse, lullv1.ReasonFilesRefused), true},
		{"a retry, refused again", st(metav1.ConditionFalse, lullv1.ReasonFilesRefused), st(metav1.ConditionFalse, lullv1.ReasonFilesRefused), false},
		{"refused to conflict", st(metav1.ConditionFalse, lullv1.ReasonFilesRefused), st(metav1.ConditionFalse, lullv1.ReasonFilesConflict), true},
		{"recovered", st(metav1.ConditionFalse, lullv1.ReasonFilesRefused), st(metav1.ConditionTrue, lullv1.ReasonCreated), false},
		{"no files", st(metav1.ConditionFalse, lullv1.ReasonFilesRefused), st("", ""), false},
	} {
		if got := FilesEvent(tc.before, tc.after) != nil; got != tc.event {
			t.Errorf("%s: event %v, want %v", tc.what, got, tc.event)
		}
	}
}

// The template controller is the one writer of a template's files
// ConfigMap. A refused create becomes FilesReady=False with one Warning
// Event, and is tried again with backoff: the reconciles in between (every
// session change brings one) do not repeat it, the retry does not record
// another Event, and the try after the quota is raised creates it. A change
// of spec.files is tried at once. A ConfigMap this controller created
// stays Created even when the status write of that try did not land.
func TestReconcileFilesRefusedThenCreated(t *testing.T) {
	ctx := context.Background()
	clock := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	var creates atomic.Int32
	var full, conflict atomic.Bool
	full.Store(true)
	sch := testenv.Scheme()
	tmpl := filesTemplate("a")
	base := fake.NewClientBuilder().WithScheme(sch).WithObjects(tmpl).WithStatusSubresource(&lullv1.SessionTemplate{}).
		WithIndex(&lullv1.Session{}, index.SessionTemplateName, index.SessionTemplateNameOf).
		Build()
	c := interceptor.NewClient(base, interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
		creates.Add(1)
		if full.Load() {
			return apierrors.NewForbidden(corev1.Resource("configmaps"), o.GetName(), errors.New("exceeded quota: q, requested: count/configmaps=1, used: count/configmaps=1, limited: count/configmaps=1"))
		}
		return c.Create(ctx, o, opts...)
	}, SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
		if conflict.Swap(false) {
			return apierrors.NewConflict(lullv1.GroupVersion.WithResource("sessiontemplates").GroupResource(), o.GetName(), errors.New("changed"))
		}
		return c.SubResource(sub).Patch(ctx, o, p, opts...)
	}})
	rec := events.NewFakeRecorder(10)
	r := &Reconciler{Client: c, Recorder: rec, Clock: clock}
	key := types.NamespacedName{Namespace: "ns", Name: "agent"}
	reconcile := func() ctrl.Result {
		t.Helper()
		res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	filesReady := func() *metav1.Condition {
		t.Helper()
		got := &lullv1.SessionTemplate{}
		if err := c.Get(ctx, key, got); err != nil {
			t.Fatal(err)
		}
		return meta.FindStatusCondition(got.Status.Conditions, lullv1.ConditionFilesReady)
	}
	warnings := func() int {
		n := 0
		for {
			select {
			case e := <-rec.Events:
				if strings.HasPrefix(e, "Warning "+lullv1.ReasonFilesRefused) {
					n++
				}
			default:
				return n
			}
		}
	}

	res := reconcile()
	if c := filesReady(); c == nil || c.Status != metav1.ConditionFalse || c.Reason != lullv1.ReasonFilesRefused {
		t.Fatalf("FilesReady = %+v, want False FilesRefused", c)
	}
	if creates.Load() != 1 || warnings() != 1 || res.RequeueAfter <= 0 || res.RequeueAfter > time.Second {
		t.Fatalf("creates %d, requeue %v; want 1 create, one Warning Event, and a retry within 1s", creates.Load(), res.RequeueAfter)
	}
	reconcile() // a session changed: no new try before the backoff ends
	if creates.Load() != 1 {
		t.Errorf("creates %d: a reconcile within the backoff tried again", creates.Load())
	}

	clock.SetTime(clock.Now().Add(time.Second))
	if res := reconcile(); creates.Load() != 2 || res.RequeueAfter != 2*time.Second {
		t.Errorf("after 1s: creates %d, requeue %v; want a second try and the next in 2s", creates.Load(), res.RequeueAfter)
	}
	if n := warnings(); n != 0 {
		t.Errorf("a retry refused again recorded %d more Warning Events", n)
	}

	full.Store(false) // the quota is raised
	clock.SetTime(clock.Now().Add(2 * time.Second))
	conflict.Store(true) // and the status write of the try that creates it does not land
	reconcile()
	clock.SetTime(clock.Now().Add(MinWriteInterval))
	reconcile()
	if c := filesReady(); c == nil || c.Status != metav1.ConditionTrue || c.Reason != lullv1.ReasonCreated {
		t.Fatalf("after the quota is raised: FilesReady = %+v, want True Created", c)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: render.FilesConfigMapName(tmpl)}, &corev1.ConfigMap{}); err != nil {
		t.Fatalf("the ConfigMap: %v", err)
	}

	full.Store(true)
	changed := &lullv1.SessionTemplate{}
	if err := c.Get(ctx, key, changed); err != nil {
		t.Fatal(err)
	}
	changed.Spec.Files.Items[0].Content = ptr.To("b")
	if err := c.Update(ctx, changed); err != nil {
		t.Fatal(err)
	}
	n := creates.Load()
	clock.SetTime(clock.Now().Add(MinWriteInterval))
	reconcile()
	if creates.Load() != n+1 || warnings() != 1 {
		t.Errorf("new spec.files: %d creates, want 1 at once, and one Warning Event", creates.Load()-n)
	}

	if err := c.Get(ctx, key, changed); err != nil {
		t.Fatal(err)
	}
	changed.Spec.Files = nil
	if err := c.Update(ctx, changed); err != nil {
		t.Fatal(err)
	}
	clock.SetTime(clock.Now().Add(MinWriteInterval))
	reconcile()
	if c := filesReady(); c != nil {
		t.Errorf("a template without files: FilesReady = %+v, want none", c)
	}
}
