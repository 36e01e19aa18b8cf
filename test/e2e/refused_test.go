package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// A session resumed onto a full quota is never left waiting in silence:
// the StatefulSet controller's create of its pod is refused by a
// ResourceQuota of 0 pods, and the session says PodQuotaExceeded, quoting
// the API server and naming the quota, with a Warning Event. Raising the
// quota after the StatefulSet controller's own backoff has grown brings
// the pod within seconds (lull asks the StatefulSet controller again when
// the quota has room), and the session runs again.
func TestPodRefusedByQuotaIsNamedAndRecovers(t *testing.T) {
	ctx := context.Background()
	ns, names, _ := setup(t, 1, "--turn-min=200ms", "--turn-max=500ms", "--think-max=200ms")
	name := names[0]
	setSuspend(t, ns, name, true)
	eventually(t, 30*time.Second, "session Suspended", func() error {
		if s := session(t, ns, name); s.Status.Phase != lullv1.SessionSuspended || pod(t, ns, name) != nil {
			return fmt.Errorf("phase %s", s.Status.Phase)
		}
		return nil
	})

	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "session-pods"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}}
	if err := c.Create(ctx, quota); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the quota controller counts the pods", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(quota), quota); err != nil {
			return err
		}
		if _, ok := quota.Status.Hard[corev1.ResourcePods]; !ok {
			return fmt.Errorf("quota status %+v", quota.Status)
		}
		return nil
	})

	setSuspend(t, ns, name, false)
	eventually(t, 30*time.Second, "the session says PodQuotaExceeded, quoting the API server", func() error {
		s := session(t, ns, name)
		for _, typ := range []string{lullv1.ConditionReady, lullv1.ConditionUpToDate} {
			c := meta.FindStatusCondition(s.Status.Conditions, typ)
			if c == nil || c.Reason != lullv1.ReasonPodQuotaExceeded || !strings.Contains(c.Message, "exceeded quota: session-pods") ||
				!strings.Contains(c.Message, "raise ResourceQuota session-pods") {
				return fmt.Errorf("%s = %+v", typ, c)
			}
		}
		return nil
	})
	if e := wantEvent(t, ns, name, lullv1.ReasonPodQuotaExceeded); e.Type != corev1.EventTypeWarning || !strings.Contains(e.Note, "session-pods") {
		t.Errorf("Event %s %s: %s, want a Warning naming the quota", e.Type, e.Reason, e.Note)
	}

	// Refused for long enough that the StatefulSet controller's own backoff
	// (5 ms doubling per failure) has grown past the time the pod is
	// given below: a pod that comes within it came because lull asked.
	time.Sleep(45 * time.Second)
	edit(t, quota, func(q *corev1.ResourceQuota) { q.Spec.Hard[corev1.ResourcePods] = resource.MustParse("1") })
	raised := time.Now()
	eventually(t, 10*time.Second, "the pod created after the quota was raised", func() error {
		if pod(t, ns, name) == nil {
			return fmt.Errorf("no pod")
		}
		return nil
	})
	t.Logf("pod created %s after the quota was raised", time.Since(raised).Round(100*time.Millisecond))
	eventually(t, 30*time.Second, "the session runs again, its refusal cleared", func() error {
		s := session(t, ns, name)
		if s.Status.Phase != lullv1.SessionRunning {
			return fmt.Errorf("phase %s", s.Status.Phase)
		}
		for _, c := range s.Status.Conditions {
			if c.Reason == lullv1.ReasonPodQuotaExceeded {
				return fmt.Errorf("%s still %s", c.Type, c.Reason)
			}
		}
		return nil
	})
}
