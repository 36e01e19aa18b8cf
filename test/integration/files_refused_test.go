package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"lull.dev/lull/internal/render"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// TestFilesQuota fills the namespace's ResourceQuota count/configmaps and
// changes a template's files: the template says FilesReady=False
// (FilesRefused, naming the quota) with one Warning Event however often it
// retries; no StatefulSet is pointed at the missing ConfigMap (the running
// session keeps its pod template, a new session gets no StatefulSet); both
// sessions say FilesNotReady. Raising the quota is enough: the retry
// creates the ConfigMap and both StatefulSets mount it.
//
// Not parallel: the quota counts every ConfigMap created in the manager's
// namespace, which the other controller tests share.
func TestFilesQuota(t *testing.T) {
	ns := startManager(t)
	ctx := t.Context()
	n := runs.Add(1)
	tpl := newTemplate(ns, fmt.Sprintf("quota%d", n), "example.com/runtime:v1")
	tpl.Spec.Files = &lullv1.Files{MountPath: "/etc/runtime", Items: []lullv1.FileItem{{Name: "config.yaml", Content: ptr.To("model: big\n")}}}
	if err := admin.Create(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	running := newSession(ns, fmt.Sprintf("quota%d-a", n), tpl.Name)
	if err := admin.Create(ctx, running); err != nil {
		t.Fatal(err)
	}
	first := render.FilesConfigMapName(tpl)
	sts := &appsv1.StatefulSet{}
	eventually(t, 15*time.Second, "the StatefulSet mounts the first files", func(ctx context.Context) error {
		if err := filesReadyIs(ctx, ns, tpl.Name, metav1.ConditionTrue, lullv1.ReasonCreated, first); err != nil {
			return err
		}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(running), sts); err != nil {
			return err
		}
		if got := filesVolumeName(sts); got != first {
			return fmt.Errorf("files volume names %q", got)
		}
		return nil
	})

	quota := fillQuota(t, ns, fmt.Sprintf("files-quota-%d", n))
	if err := admin.Get(ctx, client.ObjectKeyFromObject(tpl), tpl); err != nil {
		t.Fatal(err)
	}
	tpl.Spec.Files.Items[0].Content = ptr.To("model: small\n")
	if err := admin.Update(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	second := render.FilesConfigMapName(tpl)
	eventually(t, 15*time.Second, "FilesReady=False FilesRefused naming the quota", func(ctx context.Context) error {
		return filesReadyIs(ctx, ns, tpl.Name, metav1.ConditionFalse, lullv1.ReasonFilesRefused, second, "exceeded quota: "+quota.Name, "count/configmaps")
	})
	fresh := newSession(ns, fmt.Sprintf("quota%d-b", n), tpl.Name)
	if err := admin.Create(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*lullv1.Session{running, fresh} {
		eventually(t, 20*time.Second, "session "+s.Name+" says FilesNotReady", func(ctx context.Context) error {
			got := &lullv1.Session{}
			if err := admin.Get(ctx, client.ObjectKeyFromObject(s), got); err != nil {
				return err
			}
			if c := meta.FindStatusCondition(got.Status.Conditions, lullv1.ConditionUpToDate); c == nil || c.Reason != lullv1.ReasonFilesNotReady || !strings.Contains(c.Message, second) {
				return fmt.Errorf("UpToDate = %+v", c)
			}
			return nil
		})
	}
	// By now the create has been refused several times (1 s, 2 s, 4 s):
	// one Event, and no StatefulSet names the missing ConfigMap.
	if got := templateEvents(t, ns, tpl.Name, lullv1.ReasonFilesRefused); len(got) != 1 {
		t.Errorf("%d FilesRefused Events, want 1: %v", len(got), got)
	}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(running), sts); err != nil {
		t.Fatal(err)
	}
	if got := filesVolumeName(sts); got != first {
		t.Errorf("the running session's StatefulSet mounts %q while its ConfigMap cannot be created; want %q", got, first)
	}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(fresh), &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Errorf("the new session has a StatefulSet (%v) before its files ConfigMap exists", err)
	}

	// Wait until the backoff has grown to put the next try at least 8 s
	// away, so that a recovery before it is the quota watch's doing.
	var nextTry time.Time
	eventually(t, 60*time.Second, "the next try at least 8 s away", func(ctx context.Context) error {
		got := &lullv1.SessionTemplate{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(tpl), got); err != nil {
			return err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, lullv1.ConditionFilesReady)
		if c == nil {
			return fmt.Errorf("no FilesReady")
		}
		i := strings.LastIndex(c.Message, "next try at ")
		if i < 0 {
			return fmt.Errorf("FilesReady message names no next try: %q", c.Message)
		}
		at, err := time.Parse(time.RFC3339, c.Message[i+len("next try at "):])
		if err != nil {
			return err
		}
		if wait := time.Until(at); wait < 8*time.Second {
			return fmt.Errorf("next try in %s", wait)
		}
		nextTry = at
		return nil
	})

	// Raise the quota: the quota watch makes the next try due at once.
	quota.Spec.Hard[corev1.ResourceName("count/configmaps")] = resource.MustParse("1000")
	if err := admin.Update(ctx, quota); err != nil {
		t.Fatal(err)
	}
	quota.Status.Hard = quota.Spec.Hard
	if err := admin.Status().Update(ctx, quota); err != nil {
		t.Fatal(err)
	}
	// Before the try the backoff had set: the quota's change brought it.
	eventually(t, time.Until(nextTry)-time.Second, "the quota raised: FilesReady=True and both StatefulSets mount the new files before the backoff's next try", func(ctx context.Context) error {
		if err := filesReadyIs(ctx, ns, tpl.Name, metav1.ConditionTrue, lullv1.ReasonCreated, second); err != nil {
			return err
		}
		for _, s := range []*lullv1.Session{running, fresh} {
			if err := admin.Get(ctx, client.ObjectKeyFromObject(s), sts); err != nil {
				return err
			}
			if got := filesVolumeName(sts); got != second {
				return fmt.Errorf("%s mounts %q", s.Name, got)
			}
		}
		return nil
	})
}

// fillQuota creates a ResourceQuota that allows no more ConfigMaps in ns,
// and deletes it when the test ends. With no kube-controller-manager in
// envtest, the test writes the usage the quota controller would: the
// quota's admission plugin refuses every create of a quota whose status it
// does not know.
func fillQuota(t *testing.T, ns, name string) *corev1.ResourceQuota {
	t.Helper()
	ctx := t.Context()
	hard := corev1.ResourceList{corev1.ResourceName("count/configmaps"): resource.MustParse("1")}
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}
	if err := admin.Create(ctx, q); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), q) })
	q.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: hard.DeepCopy()}
	if err := admin.Status().Update(ctx, q); err != nil {
		t.Fatal(err)
	}
	// The plugin reads quotas from an informer: wait until it refuses.
	probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "quota-probe-"}}
	eventually(t, 10*time.Second, "the quota refuses a ConfigMap", func(ctx context.Context) error {
		p := probe.DeepCopy()
		err := admin.Create(ctx, p)
		if err == nil {
			_ = admin.Delete(ctx, p)
			return fmt.Errorf("a ConfigMap was created")
		}
		if !strings.Contains(err.Error(), "exceeded quota") {
			return err
		}
		return nil
	})
	return q
}

// templateEvents lists the Events regarding a template with reason.
func templateEvents(t *testing.T, ns, template, reason string) []string {
	t.Helper()
	var list eventsv1.EventList
	if err := admin.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "SessionTemplate" && e.Regarding.Name == template && e.Reason == reason {
			out = append(out, e.Type+": "+e.Note)
		}
	}
	return out
}

// TestFilesAdmissionDenied: a ValidatingAdmissionPolicy that denies the
// template's ConfigMap makes FilesReady=False, FilesRefused, quoting the
// policy's message; no StatefulSet is created for its session. Removing
// the policy's binding is enough: the retry creates the ConfigMap.
func TestFilesAdmissionDenied(t *testing.T) {
	t.Parallel()
	ns := startManager(t)
	ctx := t.Context()
	n := runs.Add(1)
	name := fmt.Sprintf("denied%d", n)
	message := fmt.Sprintf("ConfigMaps of template %s are managed elsewhere (test policy)", name)
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "lull-test-deny-" + name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
				Operations: []admissionv1.OperationType{admissionv1.Create},
				Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}}}},
			// Only this template's ConfigMaps: the other tests share the
			// namespace.
			MatchConditions: []admissionv1.MatchCondition{{Name: "this-template",
				Expression: fmt.Sprintf("has(object.metadata.labels) && '%s' in object.metadata.labels && object.metadata.labels['%s'] == '%s'", lullv1.LabelTemplate, lullv1.LabelTemplate, name)}},
			Validations: []admissionv1.Validation{{Expression: "false", Message: message}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			MatchResources: &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}}},
	}
	for _, o := range []client.Object{policy, binding} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.Delete(context.Background(), o) })
	}
	probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-probe", Labels: map[string]string{lullv1.LabelTemplate: name}}}
	eventually(t, 30*time.Second, "the policy denies the template's ConfigMaps", func(ctx context.Context) error {
		err := admin.Create(ctx, probe.DeepCopy())
		if err == nil {
			_ = admin.Delete(ctx, probe)
			return fmt.Errorf("the probe ConfigMap was created")
		}
		if !strings.Contains(err.Error(), message) {
			return err
		}
		return nil
	})

	tpl := newTemplate(ns, name, "example.com/runtime:v1")
	tpl.Spec.Files = &lullv1.Files{MountPath: "/etc/runtime", Items: []lullv1.FileItem{{Name: "config.yaml", Content: ptr.To("model: big\n")}}}
	if err := admin.Create(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	s := newSession(ns, name, tpl.Name)
	if err := admin.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	cm := render.FilesConfigMapName(tpl)
	eventually(t, 15*time.Second, "FilesReady=False FilesRefused quoting the policy", func(ctx context.Context) error {
		return filesReadyIs(ctx, ns, tpl.Name, metav1.ConditionFalse, lullv1.ReasonFilesRefused, cm, message, policy.Name)
	})
	eventually(t, 10*time.Second, "one Warning Event quoting the policy", func(ctx context.Context) error {
		if got := templateEvents(t, ns, tpl.Name, lullv1.ReasonFilesRefused); len(got) != 1 || !strings.Contains(got[0], message) || !strings.HasPrefix(got[0], corev1.EventTypeWarning) {
			return fmt.Errorf("events %v", got)
		}
		return nil
	})
	if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: s.Name}, &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Errorf("the session has a StatefulSet (%v) while its files ConfigMap is denied", err)
	}

	if err := admin.Delete(ctx, binding); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the policy no longer denies", func(ctx context.Context) error {
		p := probe.DeepCopy()
		if err := admin.Create(ctx, p); err != nil {
			return err
		}
		return admin.Delete(ctx, p)
	})
	// The create has been refused for a while: the next try may be up to
	// a backoff step (here at most 32 s) away.
	eventually(t, 90*time.Second, "the policy gone: FilesReady=True and the StatefulSet mounts the files", func(ctx context.Context) error {
		if err := filesReadyIs(ctx, ns, tpl.Name, metav1.ConditionTrue, lullv1.ReasonCreated, cm); err != nil {
			return err
		}
		sts := &appsv1.StatefulSet{}
		if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: s.Name}, sts); err != nil {
			return err
		}
		if got := filesVolumeName(sts); got != cm {
			return fmt.Errorf("files volume names %q", got)
		}
		return nil
	})
}
