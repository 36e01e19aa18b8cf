package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"lull.dev/lull/internal/render"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/controller/filesweep"
)

// filesTemplate is a template named name whose one file holds content.
func filesTemplate(ns, name, content string) *lullv1.SessionTemplate {
	tpl := newTemplate(ns, name, "example.com/runtime:v1")
	tpl.Spec.Files = &lullv1.Files{MountPath: "/etc/runtime", Items: []lullv1.FileItem{{Name: "config.yaml", Content: ptr.To(content)}}}
	return tpl
}

// createFiles creates, as admin, the files ConfigMap lull writes for the
// template name at content, edited by edit, and returns it.
func createFiles(t *testing.T, ns, name, content string, edit func(*corev1.ConfigMap)) *corev1.ConfigMap {
	t.Helper()
	cm, err := render.FilesConfigMap(filesTemplate(ns, name, content))
	if err != nil {
		t.Fatal(err)
	}
	edit(cm)
	if err := admin.Create(t.Context(), cm); err != nil {
		t.Fatalf("create ConfigMap %s: %v", cm.Name, err)
	}
	return cm
}

func configMapVolume(name string) corev1.Volume {
	return corev1.Volume{Name: "files", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}}
}

func exists(ctx context.Context, ns, name string) (bool, error) {
	err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &corev1.ConfigMap{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// counter reads a counter of controller-runtime's registry.
func counter(t *testing.T, name string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// TestFilesSweeper runs the sweeper's reconciler against the real API
// server, on a clock of its own: nothing is swept before the grace period
// has passed since the sweeper first saw a ConfigMap's version; then an
// unreferenced lull ConfigMap is swept, with an Event on its template, and
// the current one, one a StatefulSet references (projected source), one a
// terminating pod mounts, and two that only look like lull's are kept. A
// ConfigMap marked referenced between the judgement and the delete fails
// the delete's precondition and is kept.
func TestFilesSweeper(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := newNamespace(t, "filesweep")
	tpl := filesTemplate(ns, "rt", "current")
	if err := admin.Create(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	keep := func(cm *corev1.ConfigMap) {}
	current := createFiles(t, ns, "rt", "current", keep)
	unreferenced := createFiles(t, ns, "rt", "old", keep)
	touched := createFiles(t, ns, "rt", "about to be referenced again", keep)
	byStatefulSet := createFiles(t, ns, "rt", "a StatefulSet names it", keep)
	byPod := createFiles(t, ns, "rt", "a terminating pod mounts it", keep)
	forged := createFiles(t, ns, "rt", "forged", func(cm *corev1.ConfigMap) { cm.Data["config.yaml"] = "not what the label hashes" })
	renamed := createFiles(t, ns, "rt", "renamed", func(cm *corev1.ConfigMap) { cm.Name = "rt-config" })
	gone := createFiles(t, ns, "gone", "its template was deleted", keep)

	labels := map[string]string{"app": "foreign"}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "foreign"},
		Spec: appsv1.StatefulSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.com/c"}},
					Volumes: []corev1.Volume{{Name: "files", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
						{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: byStatefulSet.Name}}}}}}}}},
			},
		},
	}
	if err := admin.Create(ctx, sts); err != nil {
		t.Fatal(err)
	}
	// Play the StatefulSet controller: it has observed the spec.
	sts.Status.ObservedGeneration = sts.Generation
	if err := admin.Status().Update(ctx, sts); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "terminating", Finalizers: []string{"example.com/hold"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.com/c"}},
			Volumes: []corev1.Volume{configMapVolume(byPod.Name)}},
	}
	if err := admin.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.Patch(context.Background(), pod, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
	if err := admin.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil || pod.DeletionTimestamp == nil {
		t.Fatalf("the pod is not terminating: %v, %v", err, pod.DeletionTimestamp)
	}

	// A session reconciler marks touched referenced (as touchFiles does)
	// after the sweeper judged it and before its delete arrives.
	var marked int
	c := interceptor.NewClient(admin, interceptor.Funcs{
		Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
			if o.GetName() == touched.Name && marked == 0 {
				marked++
				patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, lullv1.AnnotationFilesReferencedAt, time.Now().UTC().Format(time.RFC3339))
				if err := c.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: touched.Name}}, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
					return err
				}
			}
			return c.Delete(ctx, o, opts...)
		},
	})
	const grace = time.Minute
	clock := clocktesting.NewFakePassiveClock(time.Now())
	recorder := events.NewFakeRecorder(20)
	r := &filesweep.Reconciler{Client: c, APIReader: admin, Recorder: recorder, Clock: clock, Interval: 10 * time.Minute, Grace: grace}
	pass := func() ctrl.Result {
		t.Helper()
		res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns}})
		if err != nil {
			t.Fatalf("pass: %v", err)
		}
		return res
	}
	check := func(want map[string]bool) {
		t.Helper()
		for name, present := range want {
			got, err := exists(ctx, ns, name)
			if err != nil {
				t.Fatal(err)
			}
			if got != present {
				t.Errorf("ConfigMap %s: present %v, want %v", name, got, present)
			}
		}
	}

	// Just started: everything settles for grace.
	if res := pass(); res.RequeueAfter <= 0 || res.RequeueAfter > grace+time.Second {
		t.Errorf("first pass asks for the next in %s, want within grace (%s)", res.RequeueAfter, grace)
	}
	clock.SetTime(clock.Now().Add(grace - time.Second))
	pass()
	all := map[string]bool{current.Name: true, unreferenced.Name: true, touched.Name: true, byStatefulSet.Name: true, byPod.Name: true, forged.Name: true, renamed.Name: true, gone.Name: true}
	check(all)

	conflictsBefore, sweptBefore := counter(t, "lull_files_sweep_conflicts_total"), counter(t, "lull_files_configmaps_swept_total")
	clock.SetTime(clock.Now().Add(2 * time.Second))
	pass()
	all[unreferenced.Name], all[gone.Name] = false, false
	check(all)
	if marked != 1 {
		t.Fatalf("the sweeper did not try to delete %s (%d)", touched.Name, marked)
	}
	if d := counter(t, "lull_files_sweep_conflicts_total") - conflictsBefore; d != 1 {
		t.Errorf("conflicts counted: %v, want 1", d)
	}
	if d := counter(t, "lull_files_configmaps_swept_total") - sweptBefore; d != 2 {
		t.Errorf("swept counted: %v, want 2", d)
	}
	select {
	case e := <-recorder.Events:
		if !strings.Contains(e, lullv1.ReasonFilesSwept) || !strings.Contains(e, unreferenced.Name) {
			t.Errorf("event %q: want %s naming %s", e, lullv1.ReasonFilesSwept, unreferenced.Name)
		}
	default:
		t.Errorf("no %s Event on the template", lullv1.ReasonFilesSwept)
	}
	select {
	case e := <-recorder.Events:
		t.Errorf("another Event %q: the ConfigMap of a deleted template has no template to record on", e)
	default:
	}

	// touched is at a new version now: it settles for grace again.
	pass()
	check(all)
	clock.SetTime(clock.Now().Add(grace + time.Second))
	pass()
	all[touched.Name] = false
	check(all)

	// The pod goes away: what it mounted is swept once the judgement that
	// kept it (a live read that found the pod) has stood for the interval.
	if err := admin.Patch(ctx, pod, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the pod is gone", func(ctx context.Context) error {
		if err := admin.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod: %v", err)
		}
		return nil
	})
	pass()
	check(all) // the judgement that found the pod still stands
	clock.SetTime(clock.Now().Add(r.Interval + time.Second))
	pass()
	all[byPod.Name] = false
	check(all)
}

// TestFilesMarkedReferenced: the session controller marks the files
// ConfigMap referenced (lull.dev/referenced-at) before the StatefulSet names
// it, new content included.
func TestFilesMarkedReferenced(t *testing.T) {
	t.Parallel()
	ns := startManager(t)
	ctx := t.Context()
	n := runs.Add(1)
	tpl := filesTemplate(ns, fmt.Sprintf("marked%d", n), "a")
	if err := admin.Create(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	s := newSession(ns, fmt.Sprintf("marked%d", n), tpl.Name)
	if err := admin.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	marked := func(name string) {
		t.Helper()
		eventually(t, 10*time.Second, "the StatefulSet names "+name+", which is marked referenced", func(ctx context.Context) error {
			sts := &appsv1.StatefulSet{}
			if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: s.Name}, sts); err != nil {
				return err
			}
			if got := filesVolumeName(sts); got != name {
				return fmt.Errorf("files volume names %q", got)
			}
			cm := &corev1.ConfigMap{}
			if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, cm); err != nil {
				return err
			}
			if _, err := time.Parse(time.RFC3339, cm.Annotations[lullv1.AnnotationFilesReferencedAt]); err != nil {
				return fmt.Errorf("annotation %s: %v", lullv1.AnnotationFilesReferencedAt, err)
			}
			return nil
		})
	}
	marked(render.FilesConfigMapName(tpl))
	if err := admin.Get(ctx, client.ObjectKeyFromObject(tpl), tpl); err != nil {
		t.Fatal(err)
	}
	tpl.Spec.Files.Items[0].Content = ptr.To("b")
	if err := admin.Update(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	marked(render.FilesConfigMapName(tpl))
}
