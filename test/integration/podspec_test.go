package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// TestPodSpecOnlyAPodCanRefuse: the StatefulSet API does not validate its
// pod template as a pod (only labels, annotations and restartPolicy), so a
// template change that no pod can be created from (here a mount of a volume
// that does not exist) is accepted into the SessionTemplate and into the
// StatefulSet, and the drained pod would be replaced by none: the
// StatefulSet controller fails to create it. docs/templates.md promises
// RenderFailed, naming the field, with the StatefulSet keeping its last
// good pod template.
func TestPodSpecOnlyAPodCanRefuse(t *testing.T) {
	t.Parallel()
	ns := startManager(t)
	ctx := t.Context()
	n := runs.Add(1)
	tpl := newTemplate(ns, fmt.Sprintf("podspec%d", n), "example.com/runtime:v1")
	if err := admin.Create(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	s := newSession(ns, fmt.Sprintf("podspec%d", n), tpl.Name)
	if err := admin.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: ns, Name: s.Name}
	good := &appsv1.StatefulSet{}
	eventually(t, 10*time.Second, "the StatefulSet is created", func(ctx context.Context) error {
		return admin.Get(ctx, key, good)
	})

	if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: tpl.Name}, tpl); err != nil {
		t.Fatal(err)
	}
	tpl.RuntimeContainer().VolumeMounts = []corev1.VolumeMount{{Name: "nope", MountPath: "/data"}}
	if err := admin.Update(ctx, tpl); err != nil {
		t.Fatalf("the SessionTemplate API refused the change itself (then nothing is to be shown on the Session): %v", err)
	}
	eventually(t, 15*time.Second, "RenderFailed naming the mount", func(ctx context.Context) error {
		got := &lullv1.Session{}
		if err := admin.Get(ctx, key, got); err != nil {
			return err
		}
		r := meta.FindStatusCondition(got.Status.Conditions, lullv1.ConditionReady)
		if r == nil || r.Reason != "RenderFailed" || !strings.Contains(r.Message, "volumeMounts[0].name") {
			sts := &appsv1.StatefulSet{}
			_ = admin.Get(ctx, key, sts)
			return fmt.Errorf("Ready = %+v; StatefulSet's runtime mounts %v", r, sts.Spec.Template.Spec.Containers[0].VolumeMounts)
		}
		return nil
	})
	sts := &appsv1.StatefulSet{}
	if err := admin.Get(ctx, key, sts); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(sts.Spec.Template, good.Spec.Template) {
		t.Errorf("the StatefulSet's pod template was rewritten: runtime mounts %v", sts.Spec.Template.Spec.Containers[0].VolumeMounts)
	}
}
