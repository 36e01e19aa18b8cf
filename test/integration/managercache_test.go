package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/controller/session"
	"lull.dev/lull/internal/rollout"
)

// TestManagerCache reads the cache of lull's manager: pods and StatefulSets hold no managed fields
// and no last-applied annotation, while a Session keeps exactly the
// managed-fields entry the lifecycle reads (the one owning
// status.runtime), so ReportWrittenAt is the API server's. It also scrapes
// the manager's /metrics for the queue and reconcile metrics the
// benchmarks report.
func TestManagerCache(t *testing.T) {
	t.Parallel()
	ns := startManager(t)
	ctx := t.Context()
	n := runs.Add(1)

	const lastApplied = `{"kind":"Session"}`
	tpl := newTemplate(ns, fmt.Sprintf("cache-tpl%d", n), "example.com/runtime:v1")
	if err := admin.Create(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	s := newSession(ns, fmt.Sprintf("cache-s%d", n), tpl.Name)
	s.Annotations = map[string]string{corev1.LastAppliedConfigAnnotation: lastApplied}
	if err := admin.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	sts := &appsv1.StatefulSet{}
	eventually(t, 10*time.Second, "the StatefulSet is rendered", func(ctx context.Context) error {
		return admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: s.Name}, sts)
	})
	pod := createPod(t, sts, "rev-1")
	if err := admin.Patch(ctx, pod, mergePatch(fmt.Sprintf(`{"metadata":{"annotations":{%q:"{}"}}}`, corev1.LastAppliedConfigAnnotation))); err != nil {
		t.Fatal(err)
	}
	// Another party's write of the pod's status, after the container
	// states were published: a readiness gate's condition. It publishes no
	// container's state, so the cache drops it (rollout.StatusWrittenAt
	// must not count it).
	gate := `{"status":{"conditions":[{"type":"example.com/gate","status":"True"}]}}`
	if err := admin.Status().Patch(ctx, pod, client.RawPatch(types.StrategicMergePatchType, []byte(gate)), client.FieldOwner("readiness-gate")); err != nil {
		t.Fatal(err)
	}
	// The runtime's report, through the status subresource with the
	// runtime's field manager.
	report := fmt.Sprintf(`{"status":{"runtime":{"podUID":%q,"state":"Serving","activeTurns":0,"refreshSeconds":30}}}`, pod.UID)
	if err := admin.Status().Patch(ctx, sessionRef(ns, s.Name), mergePatch(report), client.FieldOwner("lull-runtime")); err != nil {
		t.Fatal(err)
	}

	cached := managerCache
	t.Run("pods and StatefulSets without managed fields (but when a pod's container states were published) or last-applied", func(t *testing.T) {
		for _, obj := range []client.Object{&corev1.Pod{}, &appsv1.StatefulSet{}} {
			name := s.Name
			if _, ok := obj.(*corev1.Pod); ok {
				name = pod.Name
			}
			key := types.NamespacedName{Namespace: ns, Name: name}
			live := obj.DeepCopyObject().(client.Object)
			if err := admin.Get(ctx, key, live); err != nil {
				t.Fatal(err)
			}
			if len(live.GetManagedFields()) == 0 {
				t.Fatalf("%T %s has no managed fields on the API server: the test proves nothing", obj, name)
			}
			eventually(t, 10*time.Second, fmt.Sprintf("%T %s is cached stripped", obj, name), func(ctx context.Context) error {
				if err := cached.Get(ctx, key, obj); err != nil {
					return err
				}
				// A pod keeps only when its container states were
				// published, owning containerStatuses alone
				// (rollout.StatusWrittenAt reads it).
				for _, mf := range obj.GetManagedFields() {
					if _, isPod := obj.(*corev1.Pod); !isPod || mf.Subresource != "status" || mf.Time == nil || mf.Manager == "readiness-gate" ||
						mf.FieldsV1 == nil || string(mf.FieldsV1.Raw) != `{"f:status":{"f:containerStatuses":{}}}` {
						return fmt.Errorf("cached with managed-fields entry %+v", mf)
					}
				}
				if p, isPod := obj.(*corev1.Pod); isPod {
					if c, l := rollout.StatusWrittenAt(p), rollout.StatusWrittenAt(live.(*corev1.Pod)); c.IsZero() || !c.Equal(l) {
						return fmt.Errorf("cached pod's container states published at %v, API server's at %v", c, l)
					}
				}
				if _, ok := obj.GetAnnotations()[corev1.LastAppliedConfigAnnotation]; ok {
					return fmt.Errorf("cached with %s", corev1.LastAppliedConfigAnnotation)
				}
				return nil
			})
			// The spec is cut to what the controller reads (the
			// manager's stripSpec): the pod's service account is not.
			liveSpec, cachedSpec := podSpecOf(live), podSpecOf(obj)
			if liveSpec.ServiceAccountName == "" || len(liveSpec.Containers) == 0 {
				t.Fatalf("%T %s on the API server names no service account or container: the test proves nothing", obj, name)
			}
			if cachedSpec.ServiceAccountName != "" {
				t.Errorf("%T %s cached with its whole pod spec (service account %q)", obj, name, cachedSpec.ServiceAccountName)
			}
			if len(cachedSpec.Containers) != len(liveSpec.Containers) || cachedSpec.Containers[0].Image != liveSpec.Containers[0].Image {
				t.Errorf("%T %s cached without its containers' names and images: %+v", obj, name, cachedSpec.Containers)
			}
		}
	})

	t.Run("Sessions keep only the entry owning status.runtime", func(t *testing.T) {
		live := mustGetSession(t, ns, s.Name)
		if len(live.ManagedFields) < 2 || session.ReportWrittenAt(live).IsZero() {
			t.Fatalf("session on the API server: %d managed-fields entries, report written at %v; want the user's, the runtime's (and the controller's)",
				len(live.ManagedFields), session.ReportWrittenAt(live))
		}
		eventually(t, 10*time.Second, "the cached session keeps only the runtime's entry", func(ctx context.Context) error {
			got := &lullv1.Session{}
			if err := cached.Get(ctx, types.NamespacedName{Namespace: ns, Name: s.Name}, got); err != nil {
				return err
			}
			if got.Status.Runtime == nil {
				return fmt.Errorf("no report cached yet")
			}
			if len(got.ManagedFields) != 1 || got.ManagedFields[0].Manager != "lull-runtime" {
				var managers []string
				for _, mf := range got.ManagedFields {
					managers = append(managers, mf.Manager)
				}
				return fmt.Errorf("cached managed-fields entries of %v, want only lull-runtime's", managers)
			}
			if _, ok := got.Annotations[corev1.LastAppliedConfigAnnotation]; ok {
				return fmt.Errorf("cached with %s", corev1.LastAppliedConfigAnnotation)
			}
			if a, b := session.ReportWrittenAt(got), session.ReportWrittenAt(live); !a.Equal(b) {
				return fmt.Errorf("cached ReportWrittenAt %v, API server's %v", a, b)
			}
			return nil
		})
		if mustGetSession(t, ns, s.Name).Annotations[corev1.LastAppliedConfigAnnotation] != lastApplied {
			t.Error("the last-applied annotation is gone from the API server: stripping the cache must not write")
		}
	})

	t.Run("queue and reconcile metrics on /metrics", func(t *testing.T) {
		want := []string{
			`workqueue_depth{controller="session",name="session"`,
			`workqueue_queue_duration_seconds_bucket{controller="session",name="session"`,
			`controller_runtime_reconcile_time_seconds_bucket{controller="session"`,
			`controller_runtime_reconcile_total{controller="sessiontemplate"`,
		}
		eventually(t, 10*time.Second, "the metrics are served", func(ctx context.Context) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+managerMetrics+"/metrics", nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			for _, w := range want {
				if !strings.Contains(string(body), w) {
					return fmt.Errorf("no %s in /metrics", w)
				}
			}
			return nil
		})
	})
}

// freeAddr is a loopback address with a port free at the time of the call.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// podSpecOf is a pod's spec, or a StatefulSet's pod template's.
func podSpecOf(obj client.Object) *corev1.PodSpec {
	if sts, ok := obj.(*appsv1.StatefulSet); ok {
		return &sts.Spec.Template.Spec
	}
	return &obj.(*corev1.Pod).Spec
}
