package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/rollout"
)

// A session whose pod the API server refuses to the StatefulSet controller
// (a ResourceQuota of 0 pods of a PriorityClass the template's pod asks
// for) is named on the session from the controller's FailedCreate Event,
// through the manager's field-selected Event cache: PodCreateRefused (the
// quota is scoped, and the revision's pod spec puts the pod in its scope:
// the revision's refusal, which the brake counts), quoting the API
// server's own refusal and naming the quota and its scope, with a Warning
// Event; the quota is read from the manager's cache. Raising the quota makes lull ask
// the StatefulSet controller again within seconds (an update of the
// StatefulSet, which the StatefulSet controller syncs at once), and the
// pod, created then, clears the condition.
//
// With no kube-controller-manager in envtest, the test plays the
// StatefulSet controller (it creates the pod only on the StatefulSet's
// creation and on its updates, as if its own backoff were endless) and the
// quota controller (it writes the quota's status). The quota's scope, a
// PriorityClass only this test's pod uses, also keeps the tests running
// beside it in the manager's namespace from being refused (an unscoped
// quota's PodQuotaExceeded is the e2e suite's
// TestPodRefusedByQuotaIsNamedAndRecovers).
func TestPodRefusedByAQuotaIsNamedAndAskedAgainWhenRaised(t *testing.T) {
	t.Parallel()
	ns := startManager(t)
	ctx := t.Context()
	n := runs.Add(1)
	class := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("lull-refused-%d-%s", n, ns)}, Value: 10}
	if err := admin.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), class) })
	zero := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("session-pods-%d", n)},
		Spec: corev1.ResourceQuotaSpec{Hard: zero, ScopeSelector: &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{
			ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn, Values: []string{class.Name}}}}}}
	if err := admin.Create(ctx, quota); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), quota) })
	quota.Status = corev1.ResourceQuotaStatus{Hard: zero, Used: zero.DeepCopy()}
	if err := admin.Status().Update(ctx, quota); err != nil {
		t.Fatal(err)
	}

	tpl := newTemplate(ns, fmt.Sprintf("refused-tpl%d", n), "example.com/runtime:v1")
	tpl.Spec.Template.Spec.PriorityClassName = class.Name
	if err := admin.Create(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	s := newSession(ns, fmt.Sprintf("refused-s%d", n), tpl.Name)
	if err := admin.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: ns, Name: s.Name}
	sts := &appsv1.StatefulSet{}
	eventually(t, 10*time.Second, "the StatefulSet rendered", func(ctx context.Context) error { return admin.Get(ctx, key, sts) })
	setRevisions(t, ns, s.Name, "rev-1", "rev-1")

	// The StatefulSet controller's first create, refused by the quota's
	// admission plugin once its informer has the quota.
	var refused error
	eventually(t, 10*time.Second, "the quota refuses the session's pod", func(ctx context.Context) error {
		refused = tryCreatePod(ctx, sts)
		if refused == nil || !strings.Contains(refused.Error(), "exceeded quota: "+quota.Name) {
			return fmt.Errorf("create: %v", refused)
		}
		return nil
	})
	recordFailedCreate(t, sts, refused)

	eventually(t, 15*time.Second, "the session says PodCreateRefused, quoting the API server and naming the scope", func(ctx context.Context) error {
		got, err := getSession(ctx, ns, s.Name)
		if err != nil {
			return err
		}
		for _, typ := range []string{lullv1.ConditionReady, lullv1.ConditionUpToDate} {
			c := meta.FindStatusCondition(got.Status.Conditions, typ)
			if c == nil || c.Reason != lullv1.ReasonPodCreateRefused || !strings.Contains(c.Message, refused.Error()) ||
				!strings.Contains(c.Message, "ResourceQuota "+quota.Name+" is scoped (PriorityClass In ["+class.Name+"])") {
				return fmt.Errorf("%s = %+v", typ, c)
			}
		}
		return nil
	})
	eventually(t, 10*time.Second, "a Warning Event PodCreateRefused on the session", func(ctx context.Context) error {
		var list eventsv1.EventList
		if err := admin.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Kind == "Session" && e.Regarding.Name == s.Name && e.Reason == lullv1.ReasonPodCreateRefused && e.Type == corev1.EventTypeWarning &&
				strings.Contains(e.Note, quota.Name) {
				return nil
			}
		}
		return fmt.Errorf("no PodCreateRefused Event among %d", len(list.Items))
	})

	// Raise the quota (and count it, as the quota controller would): lull
	// asks the StatefulSet controller again within seconds, not at its
	// blocked schedule's next retry.
	if err := admin.Get(ctx, client.ObjectKeyFromObject(quota), quota); err != nil {
		t.Fatal(err)
	}
	if err := admin.Get(ctx, key, sts); err != nil {
		t.Fatal(err)
	}
	one := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")}
	quota.Spec.Hard = one
	if err := admin.Update(ctx, quota); err != nil {
		t.Fatal(err)
	}
	quota.Status.Hard = one
	if err := admin.Status().Update(ctx, quota); err != nil {
		t.Fatal(err)
	}
	raised := time.Now()
	before := sts.Annotations[lullv1.AnnotationCreateRetriedAt] // the blocked schedule may have asked already
	eventually(t, rollout.QuotaRetryFloor+3*time.Second, "lull asks the StatefulSet controller again", func(ctx context.Context) error {
		if err := admin.Get(ctx, key, sts); err != nil {
			return err
		}
		if got := sts.Annotations[lullv1.AnnotationCreateRetriedAt]; got == before {
			return fmt.Errorf("%s = %q, as before the quota was raised", lullv1.AnnotationCreateRetriedAt, got)
		}
		return nil
	})
	t.Logf("asked again %s after the quota was raised", time.Since(raised).Round(10*time.Millisecond))
	// The StatefulSet controller syncs the update: the create succeeds.
	eventually(t, 10*time.Second, "the pod created", func(ctx context.Context) error { return tryCreatePod(ctx, sts) })
	eventually(t, 15*time.Second, "the refusal cleared", func(ctx context.Context) error {
		got, err := getSession(ctx, ns, s.Name)
		if err != nil {
			return err
		}
		for _, c := range got.Status.Conditions {
			if c.Reason == lullv1.ReasonPodCreateRefused {
				return fmt.Errorf("%s still %s", c.Type, c.Reason)
			}
		}
		return nil
	})
}

// tryCreatePod creates ordinal 0 of sts from its pod template, as the
// StatefulSet controller does, and returns the API server's answer.
func tryCreatePod(ctx context.Context, sts *appsv1.StatefulSet) error {
	name := sts.Name + "-0"
	labels := map[string]string{appsv1.ControllerRevisionHashLabelKey: sts.Status.UpdateRevision, appsv1.StatefulSetPodNameLabel: name}
	for k, v := range sts.Spec.Template.Labels {
		labels[k] = v
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: sts.Namespace, Name: name, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}},
		Spec: *sts.Spec.Template.Spec.DeepCopy(),
	}
	pod.Spec.Hostname, pod.Spec.Subdomain = name, sts.Spec.ServiceName
	return admin.Create(ctx, pod)
}

// recordFailedCreate records the StatefulSet controller's Event for a
// refused create of sts's pod, worded as it words it.
func recordFailedCreate(t *testing.T, sts *appsv1.StatefulSet, err error) {
	t.Helper()
	now := metav1.Now()
	e := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: sts.Namespace, GenerateName: sts.Name + "."},
		InvolvedObject: corev1.ObjectReference{Kind: "StatefulSet", APIVersion: "apps/v1", Namespace: sts.Namespace, Name: sts.Name,
			UID: sts.UID, ResourceVersion: sts.ResourceVersion},
		Reason: "FailedCreate", Type: corev1.EventTypeWarning, Count: 1, FirstTimestamp: now, LastTimestamp: now,
		Message: fmt.Sprintf("create Pod %s-0 in StatefulSet %s failed error: %v", sts.Name, sts.Name, err),
		Source:  corev1.EventSource{Component: "statefulset-controller"},
	}
	if err := admin.Create(t.Context(), e); err != nil {
		t.Fatal(err)
	}
}
