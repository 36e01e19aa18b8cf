package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/scenario"
)

// What the controller cannot render becomes a condition and an Event, and
// never touches what runs: a name taken by an object the session does not
// own, and a runtime the API server refuses for a StatefulSet.
func TestRenderProblemsBecomeConditions(t *testing.T) {
	ctx := context.Background()
	ns := "e2e-render"
	if err := scenario.EnsureNamespace(ctx, c, ns); err != nil {
		t.Fatal(err)
	}
	taken := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "taken"}, Ports: []corev1.ServicePort{{Port: 80}}}}
	if err := c.Create(ctx, taken); err != nil {
		t.Fatal(err)
	}
	bad := scenario.Template(ns, "bad-resources", "example.com/lull/turnrunner:v1")
	bad.RuntimeContainer().Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
	}
	if err := c.Create(ctx, bad); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, scenario.Template(ns, "rt", "example.com/lull/turnrunner:v1")); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*lullv1.Session{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken"}, Spec: lullv1.SessionSpec{TemplateRef: lullv1.TemplateReference{Name: "rt"}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "greedy"}, Spec: lullv1.SessionSpec{TemplateRef: lullv1.TemplateReference{Name: "bad-resources"}}},
	} {
		if err := c.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]string{"taken": "NameConflict", "greedy": "RenderFailed"} {
		eventually(t, 15*time.Second, name+" shows "+want, func() error {
			r := meta.FindStatusCondition(session(t, ns, name).Status.Conditions, lullv1.ConditionReady)
			if r == nil || r.Status != metav1.ConditionFalse || r.Reason != want {
				return fmt.Errorf("Ready = %+v", r)
			}
			return nil
		})
		ev := wantEvent(t, ns, name, want)
		if ev.Type != corev1.EventTypeWarning {
			t.Errorf("%s event is %s, want Warning", want, ev.Type)
		}
	}
	r := meta.FindStatusCondition(session(t, ns, "greedy").Status.Conditions, lullv1.ConditionReady)
	if !strings.Contains(r.Message, "bad-resources") || !strings.Contains(r.Message, "limit") {
		t.Errorf("RenderFailed message does not say what to fix: %q", r.Message)
	}
	var svc corev1.Service
	if err := c.Get(ctx, client.ObjectKeyFromObject(taken), &svc); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Selector["app"] != "taken" || len(svc.OwnerReferences) != 0 {
		t.Errorf("the Service the session does not own was changed: %+v", svc.ObjectMeta)
	}
}

// Deleting the template in the middle of a rollout withdraws the drain:
// the runtimes reopen instead of staying sealed, and keep their pods.
func TestTemplateDeletedMidDrainReopensRuntimes(t *testing.T) {
	ns, names, _ := setup(t, 1, "--turn-min=1h", "--turn-max=1h", "--think-max=0s")
	name := names[0]
	p1 := pod(t, ns, name)
	eventually(t, 10*time.Second, "turn begins", func() error { return openTurn(t, p1.UID) })
	rollout(t, ns, "example.com/lull/turnrunner:v2")
	eventually(t, 10*time.Second, "runtime draining", func() error {
		if r := session(t, ns, name).Status.Runtime; r == nil || r.State != lullv1.RuntimeDraining {
			return fmt.Errorf("runtime %+v", r)
		}
		return nil
	})
	if err := c.Delete(context.Background(), &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rt"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "drain withdrawn, runtime serving again", func() error {
		s := session(t, ns, name)
		if s.Status.Drain != nil {
			return fmt.Errorf("drain still requested")
		}
		if r := s.Status.Runtime; r == nil || r.State != lullv1.RuntimeServing || r.PodUID != p1.UID {
			return fmt.Errorf("runtime %+v", r)
		}
		return nil
	})
	if p := pod(t, ns, name); p == nil || p.UID != p1.UID {
		t.Error("the running pod was replaced after its template was deleted")
	}
	s := session(t, ns, name)
	if s.Status.Phase != lullv1.SessionRunning || meta.IsStatusConditionTrue(s.Status.Conditions, lullv1.ConditionDraining) {
		t.Errorf("after the drain was withdrawn: phase %s, Draining %+v", s.Status.Phase, meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionDraining))
	}
	if c := meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionUpToDate); c == nil || c.Reason != "TemplateNotFound" {
		t.Errorf("UpToDate = %+v, want reason TemplateNotFound", c)
	}
	wantEvent(t, ns, name, "TemplateNotFound")
}

// A template change that collides with what lull adds (here a LULL_
// variable in a sidecar, which only the render can judge) is reported on
// each session as RenderFailed, naming the field, and touches nothing that
// runs: no drain, no new StatefulSet template, the pod kept.
func TestCollidingTemplateChangeLeavesRunningSessionsAlone(t *testing.T) {
	ns, names, _ := setup(t, 1)
	name := names[0]
	p1 := pod(t, ns, name)
	var sts appsv1.StatefulSet
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &sts); err != nil {
		t.Fatal(err)
	}
	tmpl := &lullv1.SessionTemplate{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "rt"}, tmpl); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(tmpl.DeepCopy())
	tmpl.Spec.Template.Spec.Containers = append(tmpl.Spec.Template.Spec.Containers,
		corev1.Container{Name: "proxy", Image: "example.com/proxy:v1", Env: []corev1.EnvVar{{Name: "LULL_SESSION_NAME", Value: "spoofed"}}})
	if err := c.Patch(context.Background(), tmpl, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "RenderFailed naming the field", func() error {
		r := meta.FindStatusCondition(session(t, ns, name).Status.Conditions, lullv1.ConditionReady)
		if r == nil || r.Reason != "RenderFailed" || !strings.Contains(r.Message, "spec.template.spec.containers[1].env[0].name") {
			return fmt.Errorf("Ready = %+v", r)
		}
		return nil
	})
	wantEvent(t, ns, name, "RenderFailed")
	// Held for a few reconciles: nothing that runs is touched.
	time.Sleep(3 * time.Second)
	s := session(t, ns, name)
	if s.Status.Drain != nil {
		t.Errorf("a drain was requested under a template lull cannot render: %+v", s.Status.Drain)
	}
	if p := pod(t, ns, name); p == nil || p.UID != p1.UID {
		t.Error("the running pod was replaced")
	}
	var now appsv1.StatefulSet
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(&sts), &now); err != nil {
		t.Fatal(err)
	}
	if now.Generation != sts.Generation {
		t.Errorf("StatefulSet changed (generation %d → %d) under a template lull cannot render", sts.Generation, now.Generation)
	}
}
