package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
	"lull.dev/lull/internal/render"
	"lull.dev/lull/test/dashboard"
)

// scrape reads the controller's /metrics, by family name.
func scrape(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+managerMetrics+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// series returns the metric of family name whose labels include want, nil
// if there is none. It fails the test if more than one matches.
func series(t *testing.T, fs map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	t.Helper()
	var found *dto.Metric
	for _, m := range fs[name].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			if labels[k] != v {
				match = false
			}
		}
		if match {
			if found != nil {
				t.Fatalf("%s%v: more than one series", name, want)
			}
			found = m
		}
	}
	return found
}

// gauge returns the value of one gauge series, or an error naming what is
// missing.
func gauge(t *testing.T, fs map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, error) {
	t.Helper()
	m := series(t, fs, name, labels)
	if m == nil {
		return 0, fmt.Errorf("no series %s%v", name, labels)
	}
	return m.GetGauge().GetValue(), nil
}

// wantGauges waits until each gauge series reads its value, and fails the
// test with the last difference seen if none comes within 30 s.
func wantGauges(t *testing.T, what string, want gaugeWant) {
	t.Helper()
	check := func() error {
		fs, err := scrape(t.Context())
		if err != nil {
			return err
		}
		for name, w := range want {
			got, err := gauge(t, fs, name, w.labels)
			if err != nil {
				return err
			}
			if got != w.value {
				return fmt.Errorf("%s%v = %v, want %v", name, w.labels, got, w.value)
			}
		}
		return nil
	}
	// Not eventually: its deadline would cut the last scrape short and
	// report that instead of the last difference.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s: %v", what, err)
		}
	}
}

type gaugeWant = map[string]struct {
	labels map[string]string
	value  float64
}

// TestMetricsOfADrain drives one session through a template update: a
// drain, the runtime's Drained report, the replacement. The controller's
// /metrics then holds one sample of each drain histogram for the template,
// however often the session was reconciled, and gauges that follow the
// session through each step; and every metric the chart's dashboard
// queries is served.
func TestMetricsOfADrain(t *testing.T) {
	t.Parallel()
	ns := startManager(t)
	ctx := t.Context()
	n := runs.Add(1)

	tpl := newTemplate(ns, fmt.Sprintf("metrics%d", n), "example.com/runtime:v1")
	if err := admin.Create(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	s := newSession(ns, fmt.Sprintf("m%d", n), tpl.Name)
	if err := admin.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	sts := &appsv1.StatefulSet{}
	eventually(t, 10*time.Second, "the StatefulSet is created", func(ctx context.Context) error {
		return admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: s.Name}, sts)
	})
	oldRev := render.TemplateRevision(tpl)
	pod := createPod(t, sts, "rev-1")
	setRevisions(t, ns, s.Name, "rev-1", "rev-1")
	waitStatus(t, ns, s.Name, "the session runs the template's revision", func(st lullv1.SessionStatus) bool {
		return st.PodUID == pod.UID && meta.IsStatusConditionTrue(st.Conditions, lullv1.ConditionUpToDate) && st.TemplateRevision == oldRev
	})
	of := map[string]string{"namespace": ns, "template": tpl.Name}
	update := map[string]string{"namespace": ns, "template": tpl.Name, "reason": string(lullv1.DrainReasonUpdate)}
	wantGauges(t, "the gauges show the session current", gaugeWant{
		"lull_template_sessions_current": {of, 1},
		"lull_template_sessions_stale":   {of, 0},
		"lull_drains_in_progress":        {update, 0},
		"lull_sessions":                  {map[string]string{"namespace": ns, "template": tpl.Name, "revision": oldRev, "phase": "Running"}, 1},
	})

	// The update: a new image, so a new template revision; the test
	// plays the StatefulSet controller publishing the update revision.
	if err := admin.Patch(ctx, &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tpl.Name}},
		client.RawPatch(types.JSONPatchType, []byte(`[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"example.com/runtime:v2"}]`))); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the StatefulSet runs the new image", func(ctx context.Context) error {
		if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: s.Name}, sts); err != nil {
			return err
		}
		if img := runtimeContainer(t, sts).Image; img != "example.com/runtime:v2" {
			return fmt.Errorf("image %q", img)
		}
		return nil
	})
	newRev := sts.Spec.Template.Labels[lullv1.LabelTemplateRevision]
	setRevisions(t, ns, s.Name, "rev-1", "rev-2")
	st := waitStatus(t, ns, s.Name, "the drain is requested", func(st lullv1.SessionStatus) bool { return st.Drain != nil })
	wantGauges(t, "the gauges show the drain", gaugeWant{
		"lull_template_sessions_current": {of, 0},
		"lull_template_sessions_stale":   {of, 1},
		"lull_drains_in_progress":        {update, 1},
		"lull_sessions":                  {map[string]string{"namespace": ns, "template": tpl.Name, "revision": oldRev, "phase": "Draining", "state": "Draining"}, 1},
	})

	// The runtime drains: a turn in flight, then Drained.
	rt := client.Client(runtimeTokenClient(t, s, pod))
	requestID := drain.RequestID(pod.UID, lullv1.DrainReasonUpdate, st.Drain.Sequence)
	for _, r := range []*lullv1.RuntimeReport{
		{PodUID: pod.UID, RequestID: requestID, State: lullv1.RuntimeDraining, ActiveTurns: 1},
		{PodUID: pod.UID, RequestID: requestID, State: lullv1.RuntimeDrained, ReportedAt: &metav1.Time{Time: time.Now()}},
	} {
		patch, err := drain.EncodeReport(r)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "the runtime writes its report", func(ctx context.Context) error {
			return rt.Status().Patch(ctx, sessionRef(ns, s.Name), client.RawPatch(types.MergePatchType, patch))
		})
	}
	eventually(t, 10*time.Second, "the drained pod is deleted", func(ctx context.Context) error { return podGone(ctx, pod) })
	next := createPod(t, sts, "rev-2")
	setRevisions(t, ns, s.Name, "rev-2", "rev-2")
	waitStatus(t, ns, s.Name, "the new pod is up to date", func(st lullv1.SessionStatus) bool {
		return st.PodUID == next.UID && meta.IsStatusConditionTrue(st.Conditions, lullv1.ConditionUpToDate) && st.Drain == nil
	})
	wantGauges(t, "the gauges show the session replaced", gaugeWant{
		"lull_template_sessions_current": {of, 1},
		"lull_template_sessions_stale":   {of, 0},
		"lull_drains_in_progress":        {update, 0},
		"lull_sessions":                  {map[string]string{"namespace": ns, "template": tpl.Name, "revision": newRev, "phase": "Running"}, 1},
	})

	// The session has been reconciled many times since the drain (each
	// report, the pod's deletion, the new pod); more reconciles add
	// nothing.
	if err := admin.Patch(ctx, sessionRef(ns, s.Name), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"example.com/poke":"1"}}}`))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	fs, err := scrape(ctx)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(st.Drain.RequestedAt.Time).Seconds() + 1
	for _, h := range []struct {
		name   string
		labels map[string]string
	}{
		{"lull_drain_request_to_drained_seconds", update},
		{"lull_drain_drained_to_delete_seconds", of},
	} {
		m := series(t, fs, h.name, h.labels)
		if m == nil {
			t.Errorf("%s%v: no series after a drain", h.name, h.labels)
			continue
		}
		if c, sum := m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum(); c != 1 || sum < 0 || sum > took {
			t.Errorf("%s%v: %d samples summing to %vs, want 1 sample within the %.0fs the drain took", h.name, h.labels, c, sum, took)
		}
	}

	t.Run("every metric the dashboard queries is served", func(t *testing.T) {
		board, err := os.ReadFile(filepath.Join("..", "..", "charts", "lull", "dashboards", "lull.json"))
		if err != nil {
			t.Fatal(err)
		}
		missing, err := dashboard.Missing(board, fs)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range missing {
			t.Errorf("the dashboard queries a metric /metrics does not serve: %s", m)
		}
	})
}
