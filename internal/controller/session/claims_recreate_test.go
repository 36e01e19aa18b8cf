package session

import (
	"context"
	"testing"

	"lull.dev/lull/internal/render"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// TestRecreatedTemplateWithOtherClaimsTouchesNothing: claim templates
// cannot change (the CEL transition rule), but a SessionTemplate deleted
// and created again under its name with other claim templates passes that
// rule (there is no oldSelf). A StatefulSet's claim templates are
// immutable, so lull keeps the old ones and writes only the new pod
// template: the new claim never reaches existing sessions, yet their pods
// are drained and replaced for it (the revision changed), which is what
// docs/templates.md says the rule prevents. (A new claim that a container
// mounts is refused by the StatefulSet API, a volume it does not have;
// one that none mounts, or that a later template version mounts, is not.)
// The session must show RenderFailed and keep its pod template, with no
// drain requested. (The fake client runs no CEL: an update stands for the
// delete and create.)
func TestRecreatedTemplateWithOtherClaimsTouchesNothing(t *testing.T) {
	t.Run("a claim added", func(t *testing.T) {
		recreateWithClaims(t, claim("workspace", "1Gi"), claim("cache", "1Gi"))
	})
	t.Run("a claim of the same name grown", func(t *testing.T) {
		recreateWithClaims(t, claim("workspace", "5Gi"))
	})
}

func claim(name, size string) corev1.PersistentVolumeClaim {
	c := corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}}}}
	c.Name = name
	return c
}

// recreateWithClaims gives a session a StatefulSet rendered with a 1Gi
// workspace claim, changes the template's claim templates to claims, and
// checks the session is RenderFailed and its pod template kept.
func recreateWithClaims(t *testing.T, claims ...corev1.PersistentVolumeClaim) {
	w := newWorld(t, interceptor.Funcs{}, nil)
	ctx := context.Background()
	key := types.NamespacedName{Namespace: "ns", Name: "agent"}
	// The session's StatefulSet as created from the first template, with
	// a workspace claim.
	tmpl := &lullv1.SessionTemplate{}
	if err := w.c.Get(ctx, key, tmpl); err != nil {
		t.Fatal(err)
	}
	tmpl.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{claim("workspace", "1Gi")}
	tmpl.RuntimeContainer().VolumeMounts = []corev1.VolumeMount{{Name: "workspace", MountPath: "/workspace"}}
	if err := w.c.Update(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	sts := &appsv1.StatefulSet{}
	if err := w.c.Get(ctx, w.key, sts); err != nil {
		t.Fatal(err)
	}
	first, err := render.StatefulSet(w.session(), tmpl, 1)
	if err != nil {
		t.Fatal(err)
	}
	sts.Spec.VolumeClaimTemplates = first.Spec.VolumeClaimTemplates
	sts.Spec.Template = first.Spec.Template
	sts.Annotations = first.Annotations
	if err := w.c.Update(ctx, sts); err != nil {
		t.Fatal(err)
	}

	// The template is deleted and created again with other claims.
	if err := w.c.Get(ctx, key, tmpl); err != nil {
		t.Fatal(err)
	}
	tmpl.Spec.VolumeClaimTemplates = claims
	if err := w.c.Update(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	after := &appsv1.StatefulSet{}
	if err := w.c.Get(ctx, w.key, after); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(after.Spec.Template, first.Spec.Template) {
		t.Errorf("the StatefulSet's pod template was rewritten (revision %s) though its claim templates stay %v",
			after.Spec.Template.Labels[lullv1.LabelTemplateRevision], names(after.Spec.VolumeClaimTemplates))
	}
	s := w.session()
	if s.Status.Drain != nil {
		t.Errorf("a drain was requested (%s) to replace the pod for a claim it will not get", s.Status.Drain.RequestID)
	}
	if c := meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionReady); c == nil || c.Reason != "RenderFailed" {
		t.Errorf("Ready = %+v, want RenderFailed naming spec.volumeClaimTemplates", c)
	}
}

func names(claims []corev1.PersistentVolumeClaim) []string {
	var out []string
	for _, c := range claims {
		out = append(out, c.Name)
	}
	return out
}
