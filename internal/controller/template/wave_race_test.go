package template

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/controller/session"
	"lull.dev/lull/internal/dev/testenv"
	"lull.dev/lull/internal/index"
	"lull.dev/lull/internal/render"
	"lull.dev/lull/internal/rollout"
)

// waveWorld is a template with maxUnavailable 1 and two sessions whose pods
// run an earlier revision, in a fake store that applies merge patches and
// their resourceVersion preconditions as the API server does: alice holds
// the wave's one place, admitted almost UnusedAdmissionTTL ago and not yet
// taken up; bob waits for a place. sessionFuncs and templateFuncs intercept
// the session reconciler's client and the template reconciler's live reads.
type waveWorld struct {
	t        *testing.T
	base     client.WithWatch
	clock    *clocktesting.FakePassiveClock
	sessions *session.Reconciler
	template *Reconciler
}

func newWaveWorld(t *testing.T, sessionFuncs, templateFuncs interceptor.Funcs) *waveWorld {
	t.Helper()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	one := intstr.FromInt32(1)
	tmpl := &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "agent"},
		Spec: lullv1.SessionTemplateSpec{
			Template:     corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: lullv1.RuntimeContainerName, Image: "example.com/agent:2"}}}},
			UpdatePolicy: lullv1.UpdatePolicy{MaxUnavailable: &one}},
		Status: lullv1.SessionTemplateStatus{Wave: []lullv1.WaveEntry{
			{Session: "alice", Sequence: 1, AdmittedAt: metav1.NewTime(now.Add(-rollout.UnusedAdmissionTTL + time.Second))}}}}
	sch := testenv.Scheme()
	objs := []client.Object{tmpl}
	var statefulSets []string
	// bob has been Ready the longer: he goes first of those waiting.
	for name, readyFor := range map[string]time.Duration{"alice": time.Hour, "bob": 2 * time.Hour} {
		ready := metav1.Condition{Type: lullv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "PodReady", LastTransitionTime: metav1.NewTime(now.Add(-readyFor))}
		waiting := metav1.Condition{Type: lullv1.ConditionUpToDate, Status: metav1.ConditionFalse, Reason: lullv1.ReasonWaitingForWave, LastTransitionTime: metav1.NewTime(now.Add(-time.Minute))}
		s := &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name + "-uid")},
			Spec:   lullv1.SessionSpec{TemplateRef: lullv1.TemplateReference{Name: "agent"}},
			Status: lullv1.SessionStatus{TemplateRevision: "old", Conditions: []metav1.Condition{ready, waiting}}}
		sts, err := render.StatefulSet(s, tmpl, 1)
		if err != nil {
			t.Fatal(err)
		}
		sts.OwnerReferences = []metav1.OwnerReference{{APIVersion: lullv1.GroupVersion.String(), Kind: "Session", Name: name, UID: s.UID, Controller: new(true)}}
		sts.UID = types.UID(name + "-sts")
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name + "-0", UID: types.UID(name + "-pod"),
			Labels:          map[string]string{lullv1.LabelSession: name, appsv1.ControllerRevisionHashLabelKey: name + "-old", lullv1.LabelTemplateRevision: "old"},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning,
				Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
				ContainerStatuses: []corev1.ContainerStatus{{Name: lullv1.RuntimeContainerName, Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}
		objs = append(objs, s, sts, pod)
		statefulSets = append(statefulSets, name)
	}
	b := fake.NewClientBuilder().WithScheme(sch).WithObjects(objs...).
		WithStatusSubresource(&lullv1.Session{}, &lullv1.SessionTemplate{}, &appsv1.StatefulSet{}).
		WithIndex(&lullv1.Session{}, index.SessionTemplateName, index.SessionTemplateNameOf).
		WithIndex(&policyv1.PodDisruptionBudget{}, index.BudgetOwner, index.BudgetOwnerOf)
	for _, o := range []client.Object{&corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}, &corev1.Service{}, &appsv1.StatefulSet{}, &corev1.Pod{}, &corev1.PersistentVolumeClaim{}} {
		b = b.WithIndex(o, index.SessionLabel, func(o client.Object) []string {
			if v, ok := o.GetLabels()[lullv1.LabelSession]; ok {
				return []string{v}
			}
			return nil
		})
	}
	base := b.Build()
	for _, name := range statefulSets {
		// The fake store runs no StatefulSet controller: give each
		// StatefulSet the status it would publish.
		sts := &appsv1.StatefulSet{}
		if err := base.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: name}, sts); err != nil {
			t.Fatal(err)
		}
		sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, UpdateRevision: name + "-new"}
		if err := base.Status().Update(context.Background(), sts); err != nil {
			t.Fatal(err)
		}
	}
	clock := clocktesting.NewFakePassiveClock(now)
	w := &waveWorld{t: t, base: base, clock: clock}
	sc := interceptor.NewClient(base, sessionFuncs)
	w.sessions = &session.Reconciler{Client: sc, APIReader: sc, Recorder: events.NewFakeRecorder(100), Clock: clock}
	w.template = &Reconciler{Client: base, APIReader: interceptor.NewClient(base, templateFuncs), Clock: clock}
	return w
}

func (w *waveWorld) reconcileSession(name string) {
	w.t.Helper()
	if _, err := w.sessions.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *waveWorld) reconcileTemplate() {
	w.t.Helper()
	if _, err := w.template.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "agent"}}); err != nil {
		w.t.Fatal(err)
	}
}

// updateDrains returns the sessions with an Update drain request
// outstanding.
func (w *waveWorld) updateDrains() []string {
	w.t.Helper()
	var list lullv1.SessionList
	if err := w.base.List(context.Background(), &list, client.InNamespace("ns")); err != nil {
		w.t.Fatal(err)
	}
	var out []string
	for _, s := range list.Items {
		if d := s.Status.Drain; d != nil && d.Reason == lullv1.DrainReasonUpdate {
			out = append(out, s.Name)
		}
	}
	return out
}

func (w *waveWorld) wave() []lullv1.WaveEntry {
	w.t.Helper()
	t := &lullv1.SessionTemplate{}
	if err := w.base.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "agent"}, t); err != nil {
		w.t.Fatal(err)
	}
	return t.Status.Wave
}

// A wave place about to lapse is either used by its session or released to
// another, never both, whichever of the two controllers writes first and
// however long either pauses between its read and its write. With
// maxUnavailable 1, at most one session drains for the update at any time.
func TestLapsingWavePlaceIsUsedOrReleasedNeverBoth(t *testing.T) {
	// The session controller decides to take up alice's place and stalls
	// before its status write lands; the template controller, its place
	// now past UnusedAdmissionTTL, reads alice from the API server
	// (nothing issued), releases the place and admits bob, who drains.
	// Then alice's write lands.
	t.Run("session write lands after the release", func(t *testing.T) {
		var paused atomic.Bool
		stalled, resume := make(chan struct{}), make(chan struct{})
		w := newWaveWorld(t, interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				if _, ok := o.(*lullv1.Session); ok && o.GetName() == "alice" && paused.CompareAndSwap(false, true) {
					close(stalled)
					<-resume
				}
				return c.SubResource(sub).Patch(ctx, o, p, opts...)
			},
		}, interceptor.Funcs{})
		done := make(chan struct{})
		go func() { defer close(done); w.reconcileSession("alice") }()
		select {
		case <-stalled:
		case <-time.After(10 * time.Second):
			t.Fatal("alice never wrote her drain request")
		}
		w.clock.SetTime(w.clock.Now().Add(2 * time.Second))
		w.reconcileTemplate()
		w.reconcileSession("bob")
		close(resume)
		<-done
		w.reconcileSession("alice") // her step, again, as the queue would retry it
		if got := w.updateDrains(); len(got) > 1 {
			t.Fatalf("sessions draining for the update: %v; maxUnavailable is 1 (wave %+v): alice's lapsed place was taken up twice", got, w.wave())
		}
	})
	// The template controller reads alice from the API server (nothing
	// issued) and stalls before it releases her place; meanwhile alice's
	// drain request lands. Then the template controller goes on.
	t.Run("release decided before the session write lands", func(t *testing.T) {
		var paused atomic.Bool
		stalled, resume := make(chan struct{}), make(chan struct{})
		w := newWaveWorld(t, interceptor.Funcs{}, interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
				err := c.Get(ctx, key, o, opts...)
				if _, ok := o.(*lullv1.Session); ok && key.Name == "alice" && paused.CompareAndSwap(false, true) {
					close(stalled)
					<-resume
				}
				return err
			},
		})
		w.clock.SetTime(w.clock.Now().Add(2 * time.Second))
		done := make(chan struct{})
		go func() { defer close(done); w.reconcileTemplate() }()
		select {
		case <-stalled:
		case <-time.After(10 * time.Second):
			t.Fatal("the template controller never read alice from the API server")
		}
		w.reconcileSession("alice")
		close(resume)
		<-done
		w.reconcileTemplate() // as its requeue would
		w.reconcileSession("bob")
		if got := w.updateDrains(); len(got) > 1 {
			t.Fatalf("sessions draining for the update: %v; maxUnavailable is 1 (wave %+v): alice's place was released while she took it up", got, w.wave())
		}
	})
}
