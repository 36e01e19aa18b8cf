package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lull.dev/lull/internal/render"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
	"lull.dev/lull/internal/controller/session"
	"lull.dev/lull/internal/manager"
)

// The controller manager runs once per process, in a namespace of its own,
// from the first test that needs it until TestMain ends: controller-runtime
// allows one controller of a name per process, so -count=N reuses it.
var (
	managerOnce sync.Once
	managerNS   string
	managerErr  error
	// managerCache and managerMetrics are the manager's cache and the
	// address of its /metrics.
	managerCache   cache.Cache
	managerMetrics string
	stopManager    = func() {}
)

// startManager starts lull's controller manager in-process, watching only
// its own namespace (so the other tests' sessions are left alone), and
// returns that namespace.
func startManager(t *testing.T) string {
	t.Helper()
	managerOnce.Do(func() {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "controller-"}}
		if managerErr = admin.Create(context.Background(), ns); managerErr != nil {
			return
		}
		if managerMetrics, managerErr = freeAddr(); managerErr != nil {
			return
		}
		mgr, err := manager.New(adminConfig, manager.Options{MetricsAddr: managerMetrics, HealthAddr: "0", Namespace: ns.Name})
		if err != nil {
			managerErr = fmt.Errorf("manager.New: %w", err)
			return
		}
		managerNS, managerCache = ns.Name, mgr.GetCache()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- mgr.Start(ctx) }()
		stopManager = func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					fmt.Fprintf(os.Stderr, "integration: manager: %v\n", err)
				}
			case <-time.After(30 * time.Second):
				fmt.Fprintln(os.Stderr, "integration: manager did not stop within 30s")
			}
		}
	})
	if managerErr != nil {
		t.Fatal(managerErr)
	}
	return managerNS
}

// runs numbers the runs of the controller tests, which share the manager's
// namespace, so each run (and -count=N) names its objects anew.
var runs atomic.Int32

// TestController runs the controller against the real API server. With no
// StatefulSet controller or kubelet in envtest, the test plays them: it
// publishes the StatefulSet's revisions and creates the pod.
func TestController(t *testing.T) {
	t.Parallel()
	ns := startManager(t)
	ctx := t.Context()
	n := runs.Add(1)

	tpl := newTemplate(ns, fmt.Sprintf("tpl%d", n), "example.com/runtime:v1")
	tpl.RuntimeContainer().Env = []corev1.EnvVar{{Name: "MODE", Value: "test"}}
	tpl.RuntimeContainer().Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}
	if err := admin.Create(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	s := newSession(ns, fmt.Sprintf("s%d", n), tpl.Name)
	if err := admin.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	key := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: name} }
	identity := lullv1.RuntimeIdentityName(s.Name)

	sts := &appsv1.StatefulSet{}
	rendered := t.Run("renders identity, Service and StatefulSet", func(t *testing.T) {
		objs := []struct {
			name string
			obj  client.Object
		}{
			{identity, &corev1.ServiceAccount{}},
			{identity, &rbacv1.Role{}},
			{identity, &rbacv1.RoleBinding{}},
			{s.Name, &corev1.Service{}},
			{s.Name, sts},
		}
		for _, o := range objs {
			eventually(t, 10*time.Second, fmt.Sprintf("%T %s is created", o.obj, o.name), func(ctx context.Context) error {
				return admin.Get(ctx, key(o.name), o.obj)
			})
			ref := metav1.GetControllerOf(o.obj)
			if ref == nil || ref.UID != s.UID || ref.Kind != "Session" || ref.Name != s.Name || ref.APIVersion != lullv1.GroupVersion.String() {
				t.Errorf("%T %s: controller reference %+v, want Session %s (uid %s)", o.obj, o.name, ref, s.Name, s.UID)
			}
			if got := o.obj.GetLabels()[lullv1.LabelSession]; got != s.Name {
				t.Errorf("%T %s: label %s=%q, want %q", o.obj, o.name, lullv1.LabelSession, got, s.Name)
			}
		}

		role := objs[1].obj.(*rbacv1.Role)
		if want := render.Role(s).Rules; !equality.Semantic.DeepEqual(role.Rules, want) {
			t.Errorf("Role rules = %+v, want %+v", role.Rules, want)
		}
		rb := objs[2].obj.(*rbacv1.RoleBinding)
		if want := render.RoleBinding(s); !equality.Semantic.DeepEqual(rb.Subjects, want.Subjects) || rb.RoleRef != want.RoleRef {
			t.Errorf("RoleBinding = %+v / %+v, want %+v / %+v", rb.Subjects, rb.RoleRef, want.Subjects, want.RoleRef)
		}
		svc := objs[3].obj.(*corev1.Service)
		if svc.Spec.ClusterIP != corev1.ClusterIPNone || svc.Spec.Selector[lullv1.LabelSession] != s.Name {
			t.Errorf("Service: clusterIP %q selector %v, want headless selecting the session", svc.Spec.ClusterIP, svc.Spec.Selector)
		}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8080 {
			t.Errorf("Service ports = %+v, want 8080", svc.Spec.Ports)
		}

		if sts.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType {
			t.Errorf("StatefulSet updateStrategy = %q, want OnDelete", sts.Spec.UpdateStrategy.Type)
		}
		if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 1 {
			t.Errorf("StatefulSet replicas = %v, want 1", sts.Spec.Replicas)
		}
		ps := sts.Spec.Template.Spec
		if ps.ServiceAccountName != identity {
			t.Errorf("pod serviceAccountName = %q, want %q", ps.ServiceAccountName, identity)
		}
		c := runtimeContainer(t, sts)
		if c.Image != tpl.RuntimeContainer().Image {
			t.Errorf("image = %q, want %q", c.Image, tpl.RuntimeContainer().Image)
		}
		env := map[string]corev1.EnvVar{}
		for _, e := range c.Env {
			env[e.Name] = e
		}
		if e := env[lullv1.EnvPodUID]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.uid" {
			t.Errorf("env %s = %+v, want the downward API's metadata.uid", lullv1.EnvPodUID, e)
		}
		if e := env[lullv1.EnvSessionName]; e.Value != s.Name {
			t.Errorf("env %s = %+v, want %q", lullv1.EnvSessionName, e, s.Name)
		}
		if e := env["MODE"]; e.Value != "test" {
			t.Errorf("template env MODE = %+v, want test", e)
		}
	})
	if !rendered {
		t.FailNow()
	}

	// Play the StatefulSet controller: the pod of revision rev-1, running
	// and ready, before the StatefulSet has published an update revision.
	pod := createPod(t, sts, "rev-1")

	t.Run("no drain request before the StatefulSet has an update revision", func(t *testing.T) {
		// The controller has seen the pod running and ready with the
		// StatefulSet still lacking status.updateRevision.
		st := waitStatus(t, ns, s.Name, "the pod is observed and the revision unknown", func(st lullv1.SessionStatus) bool {
			c := meta.FindStatusCondition(st.Conditions, lullv1.ConditionUpToDate)
			return st.PodUID == pod.UID && meta.IsStatusConditionTrue(st.Conditions, lullv1.ConditionReady) &&
				c != nil && c.Reason == "RevisionUnknown"
		})
		if st.Drain != nil {
			t.Errorf("status.drain = %+v before the StatefulSet published an update revision, want none", st.Drain)
		}
		if st.Phase != lullv1.SessionRunning {
			t.Errorf("phase = %q, want Running", st.Phase)
		}
	})

	setRevisions(t, ns, s.Name, "rev-1", "rev-2")
	wantID := drain.RequestID(pod.UID, lullv1.DrainReasonUpdate, 1)

	requested := t.Run("requests a drain of the stale pod", func(t *testing.T) {
		st := waitStatus(t, ns, s.Name, "status.drain is written", func(st lullv1.SessionStatus) bool { return st.Drain != nil })
		d := st.Drain
		if d.RequestID != wantID || d.PodUID != pod.UID || d.Reason != lullv1.DrainReasonUpdate || d.Revision != "rev-2" {
			t.Errorf("status.drain = %+v, want request %s for pod %s, reason Update, revision rev-2", d, wantID, pod.UID)
		}
		if st.Phase != lullv1.SessionDraining {
			t.Errorf("phase = %q, want Draining", st.Phase)
		}
		if !meta.IsStatusConditionTrue(st.Conditions, lullv1.ConditionDraining) {
			t.Errorf("condition Draining is not True: %+v", st.Conditions)
		}
		if c := meta.FindStatusCondition(st.Conditions, lullv1.ConditionUpToDate); c == nil || c.Status != metav1.ConditionFalse {
			t.Errorf("condition UpToDate = %+v, want False", c)
		}
		if st.CurrentRevision != "rev-1" || st.UpdateRevision != "rev-2" {
			t.Errorf("revisions current %q update %q, want rev-1 rev-2", st.CurrentRevision, st.UpdateRevision)
		}
	})
	if !requested {
		t.FailNow()
	}

	// The runtime's token is bound to its pod, as the kubelet's projected
	// token is: the admission policy accepts reports naming that pod only.
	rt := client.Client(runtimeTokenClient(t, s, pod))
	report := func(t *testing.T, r *lullv1.RuntimeReport) {
		t.Helper()
		patch, err := drain.EncodeReport(r)
		if err != nil {
			t.Fatal(err)
		}
		// The controller made the runtime's Role moments ago: retry until
		// RBAC has it.
		eventually(t, 10*time.Second, "runtime writes its report", func(ctx context.Context) error {
			return rt.Status().Patch(ctx, sessionRef(ns, s.Name), client.RawPatch(types.MergePatchType, patch))
		})
	}
	podStays := func(t *testing.T) {
		t.Helper()
		consistently(t, 2*time.Second, "pod is not deleted", func(ctx context.Context) error {
			p := &corev1.Pod{}
			if err := admin.Get(ctx, key(pod.Name), p); err != nil {
				return err
			}
			if p.UID != pod.UID || p.DeletionTimestamp != nil {
				return fmt.Errorf("pod %s (uid %s) deleted or replaced", pod.Name, pod.UID)
			}
			return nil
		})
	}

	t.Run("Drained report with a wrong request ID deletes nothing", func(t *testing.T) {
		report(t, &lullv1.RuntimeReport{PodUID: pod.UID, RequestID: drain.RequestID(pod.UID, lullv1.DrainReasonUpdate, 9), State: lullv1.RuntimeDrained})
		// The controller has acted on the report once its Active condition
		// counts the pod's runtime as idle.
		waitStatus(t, ns, s.Name, "the controller sees the report", func(st lullv1.SessionStatus) bool {
			c := meta.FindStatusCondition(st.Conditions, lullv1.ConditionActive)
			return c != nil && c.Status == metav1.ConditionFalse
		})
		podStays(t)
	})

	t.Run("Drained report from another pod deletes nothing", func(t *testing.T) {
		// No runtime can write a report in another pod's name (the policy
		// refuses it); an admin can, and the controller must still ignore it.
		patch, err := drain.EncodeReport(&lullv1.RuntimeReport{PodUID: "some-other-pod", RequestID: wantID, State: lullv1.RuntimeDrained})
		if err != nil {
			t.Fatal(err)
		}
		if err := admin.Status().Patch(t.Context(), sessionRef(ns, s.Name), client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, ns, s.Name, "the controller sees the report", func(st lullv1.SessionStatus) bool {
			c := meta.FindStatusCondition(st.Conditions, lullv1.ConditionActive)
			return c != nil && c.Status == metav1.ConditionUnknown && c.Reason == "NoReport"
		})
		podStays(t)
	})

	t.Run("Draining report deletes nothing", func(t *testing.T) {
		report(t, &lullv1.RuntimeReport{PodUID: pod.UID, RequestID: wantID, State: lullv1.RuntimeDraining, ActiveTurns: 1})
		waitStatus(t, ns, s.Name, "the controller sees the report", func(st lullv1.SessionStatus) bool {
			return meta.IsStatusConditionTrue(st.Conditions, lullv1.ConditionActive)
		})
		podStays(t)
	})

	drained := &lullv1.RuntimeReport{PodUID: pod.UID, RequestID: wantID, State: lullv1.RuntimeDrained}
	deleted := t.Run("matching Drained report deletes the pod", func(t *testing.T) {
		report(t, drained)
		eventually(t, 10*time.Second, "pod is deleted", func(ctx context.Context) error {
			return podGone(ctx, pod)
		})
		st := waitStatus(t, ns, s.Name, "the controller sees the pod gone", func(st lullv1.SessionStatus) bool {
			return st.PodUID == "" && st.Phase == lullv1.SessionPending
		})
		if st.Drain != nil {
			t.Errorf("status.drain = %+v after the pod is gone, want none", st.Drain)
		}
		if !equality.Semantic.DeepEqual(st.Runtime, drained) {
			t.Errorf("status.runtime = %+v, want the runtime's report %+v, untouched", st.Runtime, drained)
		}
		// The controller's status writes never take ownership of
		// status.runtime.
		got := mustGetSession(t, ns, s.Name)
		for _, mf := range got.ManagedFields {
			if mf.Subresource == "status" && mf.FieldsV1 != nil && strings.Contains(string(mf.FieldsV1.Raw), `"f:runtime"`) && mf.Manager == lullv1.FieldManagerController {
				t.Errorf("field manager %s owns status.runtime: %s", mf.Manager, mf.FieldsV1.Raw)
			}
		}
	})
	if !deleted {
		t.FailNow()
	}

	t.Run("pod of the update revision gets no drain request", func(t *testing.T) {
		next := createPod(t, sts, "rev-2")
		st := waitStatus(t, ns, s.Name, "the new pod is up to date", func(st lullv1.SessionStatus) bool {
			return st.PodUID == next.UID && meta.IsStatusConditionTrue(st.Conditions, lullv1.ConditionReady) &&
				meta.IsStatusConditionTrue(st.Conditions, lullv1.ConditionUpToDate)
		})
		if st.Drain != nil {
			t.Errorf("status.drain = %+v for a pod of the update revision, want none", st.Drain)
		}
		if st.Phase != lullv1.SessionRunning || !meta.IsStatusConditionTrue(st.Conditions, lullv1.ConditionReady) {
			t.Errorf("phase %q, Ready %+v; want Running and Ready", st.Phase, meta.FindStatusCondition(st.Conditions, lullv1.ConditionReady))
		}
		if !equality.Semantic.DeepEqual(st.Runtime, drained) {
			t.Errorf("status.runtime = %+v, want the old runtime's report %+v, untouched", st.Runtime, drained)
		}
	})

	t.Run("template image change reaches the StatefulSet at once", func(t *testing.T) {
		oldRevision := sts.Spec.Template.Labels[lullv1.LabelTemplateRevision]
		if err := admin.Patch(t.Context(), &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tpl.Name}},
			client.RawPatch(types.JSONPatchType, []byte(`[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"example.com/runtime:v2"}]`))); err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, "StatefulSet runs the new image", func(ctx context.Context) error {
			if err := admin.Get(ctx, key(s.Name), sts); err != nil {
				return err
			}
			if img := runtimeContainer(t, sts).Image; img != "example.com/runtime:v2" {
				return fmt.Errorf("image %q", img)
			}
			return nil
		})
		if rev := sts.Spec.Template.Labels[lullv1.LabelTemplateRevision]; rev == oldRevision || rev == "" {
			t.Errorf("pod template label %s = %q, want a new revision (was %q)", lullv1.LabelTemplateRevision, rev, oldRevision)
		}
		if sts.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType {
			t.Errorf("updateStrategy = %q after the update, want OnDelete", sts.Spec.UpdateStrategy.Type)
		}
		// The StatefulSet controller has not observed the new generation:
		// the session waits, and asks no drain.
		st := waitStatus(t, ns, s.Name, "the session waits for the new revision", func(st lullv1.SessionStatus) bool {
			c := meta.FindStatusCondition(st.Conditions, lullv1.ConditionUpToDate)
			return c != nil && c.Reason == "RevisionUnknown"
		})
		if st.Drain != nil {
			t.Errorf("status.drain = %+v while the StatefulSet's generation is unobserved, want none", st.Drain)
		}
	})
}

func runtimeContainer(t *testing.T, sts *appsv1.StatefulSet) corev1.Container {
	t.Helper()
	for _, c := range sts.Spec.Template.Spec.Containers {
		if c.Name == lullv1.RuntimeContainerName {
			return c
		}
	}
	t.Fatalf("StatefulSet %s has no %q container", sts.Name, lullv1.RuntimeContainerName)
	return corev1.Container{}
}

// createPod plays the StatefulSet controller and the kubelet: it creates
// ordinal 0 of sts from its pod template, labelled with revision, and marks
// it Running and Ready.
func createPod(t *testing.T, sts *appsv1.StatefulSet, revision string) *corev1.Pod {
	t.Helper()
	return createPodWithStatus(t, sts, revision, func(*corev1.Pod) {})
}

// createPodWithStatus creates ordinal 0 of sts as createPod does, and writes
// its status: Running and Ready, then changed by mutate.
func createPodWithStatus(t *testing.T, sts *appsv1.StatefulSet, revision string, mutate func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	ctx := t.Context()
	name := sts.Name + "-0"
	labels := map[string]string{
		appsv1.ControllerRevisionHashLabelKey: revision,
		appsv1.StatefulSetPodNameLabel:        name,
	}
	for k, v := range sts.Spec.Template.Labels {
		labels[k] = v
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: sts.Namespace, Name: name, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))},
		},
		Spec: *sts.Spec.Template.Spec.DeepCopy(),
	}
	pod.Spec.Hostname, pod.Spec.Subdomain = name, sts.Spec.ServiceName
	// The previous pod of this name may still be on its way out.
	eventually(t, 10*time.Second, "create pod "+name, func(ctx context.Context) error {
		p := pod.DeepCopy()
		if err := admin.Create(ctx, p); err != nil {
			return err
		}
		pod = p
		return nil
	})
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: lullv1.RuntimeContainerName, Image: pod.Spec.Containers[0].Image, Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		}},
	}
	mutate(pod)
	if err := admin.Status().Update(ctx, pod); err != nil {
		t.Fatalf("write status of pod %s: %v", name, err)
	}
	return pod
}

// setRevisions plays the StatefulSet controller: it publishes the
// StatefulSet's current and update revisions for its current generation.
func setRevisions(t *testing.T, ns, name, current, update string) {
	t.Helper()
	eventually(t, 10*time.Second, "publish StatefulSet revisions", func(ctx context.Context) error {
		sts := &appsv1.StatefulSet{}
		if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, sts); err != nil {
			return err
		}
		sts.Status = appsv1.StatefulSetStatus{
			ObservedGeneration: sts.Generation,
			Replicas:           1, ReadyReplicas: 1, CurrentReplicas: 1, AvailableReplicas: 1,
			CurrentRevision: current, UpdateRevision: update,
		}
		return admin.Status().Update(ctx, sts)
	})
}

// waitStatus waits until the session's status satisfies ok and returns it.
func waitStatus(t *testing.T, ns, name, what string, ok func(lullv1.SessionStatus) bool) lullv1.SessionStatus {
	t.Helper()
	var st lullv1.SessionStatus
	// Generous: the controller writes a passing state (revision unknown,
	// pod pending, no report yet) only once it has lasted
	// session.SettleDelay, or session.ReplacingSettleDelay (30 s) during a
	// committed replacement.
	eventually(t, session.ReplacingSettleDelay+15*time.Second, what, func(ctx context.Context) error {
		s, err := getSession(ctx, ns, name)
		if err != nil {
			return err
		}
		st = s.Status
		if !ok(st) {
			return fmt.Errorf("status is %s", describe(st))
		}
		return nil
	})
	return st
}

// describe summarises a status for failure messages.
func describe(st lullv1.SessionStatus) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s pod=%s drain=%+v runtime=%+v", st.Phase, st.PodUID, st.Drain, st.Runtime)
	for _, c := range st.Conditions {
		fmt.Fprintf(&b, " %s=%s/%s", c.Type, c.Status, c.Reason)
	}
	return b.String()
}

// podGone returns nil once pod is deleted, being deleted, or replaced by a
// pod of another UID under its name.
func podGone(ctx context.Context, pod *corev1.Pod) error {
	p := &corev1.Pod{}
	err := admin.Get(ctx, client.ObjectKeyFromObject(pod), p)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	case p.UID != pod.UID || p.DeletionTimestamp != nil:
		return nil
	}
	return errors.New("pod still there")
}
