package manager_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"lull.dev/lull/internal/render"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/catalog/catalogtest"
	"lull.dev/lull/internal/controller/filesweep"
	"lull.dev/lull/internal/controller/session"
	"lull.dev/lull/internal/index"
	"lull.dev/lull/internal/manager"
)

// cacheView is the manager's cache as the controllers read it: only the
// objects its label selectors let in (lull.dev/session on what lull
// renders per session, lull.dev/files on ConfigMaps), and, when strip is
// set, each through the cache transform the manager installs for its type
// (session.StripSessionForCache for Sessions, manager.StripForCache for the rest).
// Writes go to the wrapped client unchanged, and their responses are
// whole, as the API server's are.
type cacheView struct {
	client.Client
	strip bool
}

func transform(o runtime.Object) error {
	if _, ok := o.(*lullv1.Session); ok {
		_, err := session.StripSessionForCache(o)
		return err
	}
	_, err := manager.StripForCache(o)
	return err
}

// selected reports whether the manager's cache holds o (New's ByObject).
func selected(o runtime.Object) bool {
	obj := o.(client.Object)
	switch o.(type) {
	case *corev1.Pod, *appsv1.StatefulSet, *corev1.Service, *corev1.ServiceAccount, *rbacv1.Role, *rbacv1.RoleBinding, *corev1.PersistentVolumeClaim:
		_, ok := obj.GetLabels()[lullv1.LabelSession]
		return ok
	case *corev1.ConfigMap:
		_, ok := obj.GetLabels()[lullv1.LabelFiles]
		return ok
	}
	return true
}

func (c cacheView) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := c.Client.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if !selected(obj) {
		gvk, err := c.GroupVersionKindFor(obj)
		if err != nil {
			return err
		}
		return apierrors.NewNotFound(schema.GroupResource{Group: gvk.Group, Resource: strings.ToLower(gvk.Kind) + "s"}, key.Name)
	}
	if !c.strip {
		return nil
	}
	return transform(obj)
}

func (c cacheView) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := c.Client.List(ctx, list, opts...); err != nil {
		return err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return err
	}
	kept := items[:0]
	for _, o := range items {
		if !selected(o) {
			continue
		}
		if c.strip {
			if err := transform(o); err != nil {
				return err
			}
		}
		kept = append(kept, o)
	}
	return meta.SetList(list, kept)
}

// readerWorld is one namespace with a template, a session and what the
// controllers made of them, in a fake API server. The Session reconciler
// and the files sweeper read it through a cache that strips (or, for the
// reference run, one that does not) and through the API server.
type readerWorld struct {
	t       *testing.T
	api     client.WithWatch
	clock   *clocktesting.FakePassiveClock
	session *session.Reconciler
	sweeper *filesweep.Reconciler
	events  *events.FakeRecorder
	log     []string
}

var readerT0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// richTemplate is a template whose pod carries much of what the cache
// cuts: a proxy sidecar with probes and resources, the agent (a native
// sidecar and a projected token), a user's ConfigMap volume and env
// reference, an emptyDir, a claim template with a size and class, and
// spec.files.
func richTemplate(image, files string) *lullv1.SessionTemplate {
	return &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "agent", Generation: 1},
		Spec: lullv1.SessionTemplateSpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: ptr.To[int64](120),
				Tolerations:                   []corev1.Toleration{{Key: "sessions", Operator: corev1.TolerationOpExists}},
				Volumes: []corev1.Volume{
					{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					{Name: "settings", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "user-settings"}}}},
				},
				Containers: []corev1.Container{
					{Name: "proxy", Image: "proxy:1", Args: []string{"--port=8080"},
						Resources:      corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz"}}},
						Env:            []corev1.EnvVar{{Name: "MODE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "user-config"}, Key: "mode"}}}}},
					{Name: lullv1.RuntimeContainerName, Image: image, Command: []string{"/runtime"},
						Env:          []corev1.EnvVar{{Name: "PLAIN", Value: "x"}},
						Ports:        []corev1.ContainerPort{{Name: "http", ContainerPort: 8000}},
						VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}, {Name: "settings", MountPath: "/settings"}}},
				},
			}},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "work"},
				Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("fast"), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}},
			Agent: &lullv1.AgentSpec{},
			Files: &lullv1.Files{MountPath: "/etc/runtime", Items: []lullv1.FileItem{{Name: "config", Content: ptr.To(files)}}},
		}}
}

func newReaderWorld(t *testing.T, strip bool) *readerWorld {
	t.Helper()
	sch := manager.Scheme()
	b := fake.NewClientBuilder().WithScheme(sch).
		WithStatusSubresource(&lullv1.Session{}, &lullv1.SessionTemplate{}, &appsv1.StatefulSet{}, &corev1.Pod{}).
		WithIndex(&lullv1.Session{}, index.SessionTemplateName, func(o client.Object) []string {
			return []string{o.(*lullv1.Session).Spec.TemplateRef.Name}
		}).
		WithIndex(&corev1.Event{}, session.IndexInvolvedUID, func(o client.Object) []string {
			return []string{string(o.(*corev1.Event).InvolvedObject.UID)}
		}).
		WithIndex(&corev1.Pod{}, index.PodNodeName, index.PodNodeNameOf).
		WithIndex(&policyv1.PodDisruptionBudget{}, index.BudgetOwner, index.BudgetOwnerOf)
	byLabel := func(o client.Object) []string {
		if v, ok := o.GetLabels()[lullv1.LabelSession]; ok {
			return []string{v}
		}
		return nil
	}
	for _, o := range []client.Object{&corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}, &corev1.Service{},
		&appsv1.StatefulSet{}, &corev1.Pod{}, &corev1.PersistentVolumeClaim{}} {
		b = b.WithIndex(o, index.SessionLabel, byLabel)
	}
	tmpl := richTemplate("registry.example.com/agent-runtime:v1", "one")
	s := &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice", UID: "session-uid", CreationTimestamp: metav1.NewTime(readerT0)},
		Spec: lullv1.SessionSpec{TemplateRef: lullv1.TemplateReference{Name: "agent"}}}
	files, err := render.FilesConfigMap(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	files.UID = types.UID("uid-" + files.Name)
	base := b.WithObjects(tmpl, s, files, catalogtest.Catalog()).Build()
	// The fake API server sets no UIDs: set one on each create, as the API
	// server does (the reaper and the sweeper tell objects by UID).
	api := interceptor.NewClient(base, interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if obj.GetUID() == "" {
			obj.SetUID(types.UID(fmt.Sprintf("uid-%T-%s", obj, obj.GetName())))
		}
		return c.Create(ctx, obj, opts...)
	}})
	w := &readerWorld{t: t, api: api, clock: clocktesting.NewFakePassiveClock(readerT0), events: events.NewFakeRecorder(1000)}
	cached := cacheView{Client: api, strip: strip}
	w.session = &session.Reconciler{Client: cached, APIReader: api, Recorder: w.events, Clock: w.clock}
	w.sweeper = &filesweep.Reconciler{Client: cached, APIReader: api, Clock: w.clock, Grace: time.Minute, Interval: time.Minute}
	return w
}

func (w *readerWorld) ctx() context.Context { return context.Background() }

// reconcile runs the Session reconciler once and logs its outcome.
func (w *readerWorld) reconcile(step string) {
	w.t.Helper()
	res, err := w.session.Reconcile(w.ctx(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "alice"}})
	w.log = append(w.log, fmt.Sprintf("%s: session reconcile requeue=%v err=%v", step, res.RequeueAfter, err))
}

// sweep runs the sweeper's pass over the namespace.
func (w *readerWorld) sweep(step string) {
	w.t.Helper()
	res, err := w.sweeper.Reconcile(w.ctx(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns"}})
	w.log = append(w.log, fmt.Sprintf("%s: sweep requeue=%v err=%v", step, res.RequeueAfter, err))
}

// statefulSetController does what the StatefulSet controller would: it
// publishes the revision of the StatefulSet's current spec and, when it
// wants a replica and has no pod, creates its pod from its pod template
// (whole, as the API server holds it).
func (w *readerWorld) statefulSetController(revision string) {
	w.t.Helper()
	sts := &appsv1.StatefulSet{}
	if err := w.api.Get(w.ctx(), types.NamespacedName{Namespace: "ns", Name: "alice"}, sts); err != nil {
		w.t.Fatal(err)
	}
	sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, UpdateRevision: revision, CurrentRevision: revision}
	if err := w.api.Status().Update(w.ctx(), sts); err != nil {
		w.t.Fatal(err)
	}
	pod := &corev1.Pod{}
	err := w.api.Get(w.ctx(), types.NamespacedName{Namespace: "ns", Name: "alice-0"}, pod)
	if err == nil || ptr.Deref(sts.Spec.Replicas, 1) == 0 {
		return
	}
	pod = &corev1.Pod{ObjectMeta: *sts.Spec.Template.ObjectMeta.DeepCopy(), Spec: *sts.Spec.Template.Spec.DeepCopy()}
	pod.Namespace, pod.Name, pod.UID = "ns", "alice-0", types.UID("pod-"+revision)
	pod.Labels = merge(pod.Labels, map[string]string{appsv1.ControllerRevisionHashLabelKey: revision})
	pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}
	pod.Spec.NodeName = "node-1"
	if err := w.api.Create(w.ctx(), pod); err != nil {
		w.t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: lullv1.RuntimeContainerName, Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}
	if err := w.api.Status().Update(w.ctx(), pod); err != nil {
		w.t.Fatal(err)
	}
}

func merge(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// editTemplate changes the template's spec as a user would, and creates
// its files ConfigMap as the template controller would.
func (w *readerWorld) editTemplate(edit func(t *lullv1.SessionTemplate)) {
	w.t.Helper()
	t := &lullv1.SessionTemplate{}
	if err := w.api.Get(w.ctx(), types.NamespacedName{Namespace: "ns", Name: "agent"}, t); err != nil {
		w.t.Fatal(err)
	}
	edit(t)
	t.Generation++
	if err := w.api.Update(w.ctx(), t); err != nil {
		w.t.Fatal(err)
	}
	files, err := render.FilesConfigMap(t)
	if err != nil {
		w.t.Fatal(err)
	}
	files.UID = types.UID("uid-" + files.Name) // the fake API server sets none
	if err := w.api.Create(w.ctx(), files); err != nil && !apierrors.IsAlreadyExists(err) {
		w.t.Fatal(err)
	}
}

// admit admits the session's first drain to the template's wave, as the
// template controller would.
func (w *readerWorld) admit() {
	w.t.Helper()
	t := &lullv1.SessionTemplate{}
	if err := w.api.Get(w.ctx(), types.NamespacedName{Namespace: "ns", Name: "agent"}, t); err != nil {
		w.t.Fatal(err)
	}
	t.Status.Wave = []lullv1.WaveEntry{{Session: "alice", Sequence: 1}}
	if err := w.api.Status().Update(w.ctx(), t); err != nil {
		w.t.Fatal(err)
	}
}

// reportDrained writes the runtime's Drained report for the outstanding
// drain request.
func (w *readerWorld) reportDrained() {
	w.t.Helper()
	s := &lullv1.Session{}
	if err := w.api.Get(w.ctx(), types.NamespacedName{Namespace: "ns", Name: "alice"}, s); err != nil {
		w.t.Fatal(err)
	}
	d := s.Status.Drain
	if d == nil {
		w.log = append(w.log, "no drain request to answer")
		return
	}
	s.Status.Runtime = &lullv1.RuntimeReport{PodUID: d.PodUID, RequestID: d.RequestID, State: lullv1.RuntimeDrained}
	if err := w.api.Status().Update(w.ctx(), s); err != nil {
		w.t.Fatal(err)
	}
}

func (w *readerWorld) editSession(edit func(s *lullv1.Session)) {
	w.t.Helper()
	s := &lullv1.Session{}
	if err := w.api.Get(w.ctx(), types.NamespacedName{Namespace: "ns", Name: "alice"}, s); err != nil {
		w.t.Fatal(err)
	}
	edit(s)
	if err := w.api.Update(w.ctx(), s); err != nil {
		w.t.Fatal(err)
	}
}

// snapshot is the namespace as the API server holds it, without what
// differs between two runs that wrote the same things (resourceVersions,
// managed fields).
func (w *readerWorld) snapshot() map[string]string {
	w.t.Helper()
	out := map[string]string{}
	for _, list := range []client.ObjectList{&lullv1.SessionList{}, &appsv1.StatefulSetList{}, &corev1.PodList{}, &corev1.ServiceList{},
		&corev1.ServiceAccountList{}, &rbacv1.RoleList{}, &rbacv1.RoleBindingList{}, &corev1.ConfigMapList{}} {
		if err := w.api.List(w.ctx(), list, client.InNamespace("ns")); err != nil {
			w.t.Fatal(err)
		}
		if err := meta.EachListItem(list, func(o runtime.Object) error {
			obj := o.(client.Object)
			obj.SetResourceVersion("")
			obj.SetManagedFields(nil)
			if s, ok := obj.(*lullv1.Session); ok {
				// Some conditions are stamped with the wall clock, not
				// the reconciler's (holdConditions): not a write that
				// differs. The reconciler's clock stays within an hour
				// of readerT0.
				for i := range s.Status.Conditions {
					if c := &s.Status.Conditions[i]; c.LastTransitionTime.Before(&metav1.Time{Time: readerT0}) || c.LastTransitionTime.After(readerT0.Add(time.Hour)) {
						c.LastTransitionTime = metav1.Time{}
					}
				}
			}
			b, err := json.Marshal(obj)
			out[fmt.Sprintf("%T %s", obj, obj.GetName())] = string(b)
			return err
		}); err != nil {
			w.t.Fatal(err)
		}
	}
	return out
}

func (w *readerWorld) eventLog() []string {
	var out []string
	for {
		select {
		case e := <-w.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// mid reports which objects step i's snapshot holds (step 3: after the
// sweeps while the old pod still ran).
func mid(snaps []map[string]string, i int) map[string]bool {
	out := map[string]bool{}
	for k := range snaps[i] {
		out[k] = true
	}
	return out
}

func filesName(t *testing.T, content string) string {
	t.Helper()
	return render.FilesConfigMapName(richTemplate("x", content))
}

func runtimeImageOf(sts *appsv1.StatefulSet) string {
	for _, c := range sts.Spec.Template.Spec.Containers {
		if c.Name == lullv1.RuntimeContainerName {
			return c.Image
		}
	}
	return ""
}

// sameRuns fails t unless the run on the stripped cache wrote, logged and
// recorded exactly what the run on whole objects did, step by step.
func sameRuns(t *testing.T, whole, cut *readerWorld, wholeSnaps, cutSnaps []map[string]string) {
	t.Helper()
	if len(wholeSnaps) != len(cutSnaps) {
		t.Fatalf("%d steps on whole objects, %d on stripped ones", len(wholeSnaps), len(cutSnaps))
	}
	for i := range wholeSnaps {
		for k, v := range wholeSnaps[i] {
			if cutSnaps[i][k] != v {
				t.Errorf("step %d, %s:\n stripped cache: %s\n whole cache:    %s", i, k, cutSnaps[i][k], v)
			}
		}
		for k := range cutSnaps[i] {
			if _, ok := wholeSnaps[i][k]; !ok {
				t.Errorf("step %d: %s exists only with the stripped cache", i, k)
			}
		}
	}
	if fmt.Sprint(whole.log) != fmt.Sprint(cut.log) {
		t.Errorf("outcomes and Events differ:\n stripped cache: %q\n whole cache:    %q", cut.log, whole.log)
	}
}

// runSteps runs steps on a new world, snapshotting the API server after
// each.
func runSteps(t *testing.T, strip bool, steps []readerStep) (*readerWorld, []map[string]string) {
	w := newReaderWorld(t, strip)
	var snaps []map[string]string
	for _, st := range steps {
		w.log = append(w.log, "step "+st.name)
		st.do(w)
		snaps = append(snaps, w.snapshot())
		w.log = append(w.log, w.eventLog()...)
	}
	return w, snaps
}

type readerStep struct {
	name string
	do   func(w *readerWorld)
}

// edit changes an object on the API server as a second writer would
// (kubectl edit).
func (w *readerWorld) edit(obj client.Object, change func()) {
	w.t.Helper()
	if err := w.api.Get(w.ctx(), client.ObjectKeyFromObject(obj), obj); err != nil {
		w.t.Fatal(err)
	}
	change()
	if err := w.api.Update(w.ctx(), obj); err != nil {
		w.t.Fatal(err)
	}
}
