package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
	"lull.dev/lull/internal/manager"
)

// ProtocolFloor is the second floor lull's converge is judged against: a
// plain client doing the drain protocol's minimal sequence for as many
// sessions, as fast as the API server takes it, with lull's controller
// stopped. Per session: the StatefulSet's image patch (as the raw
// rollout), the drain request written into the Session's status once the
// new update revision is published, a stand-in runtime's Drained report
// for it, the pod's delete (UID precondition, grace period 0 as the raw
// rollout's: KWOK finishes a plain pod's graceful delete by name, which can
// remove its recreated successor), the StatefulSet controller's recreation, and the new
// pod's runtime report. The raw rollout measures what Kubernetes needs to
// replace pods; this adds what the protocol itself must write, so converge
// ÷ this floor is what lull's controller adds on top of the protocol.
type ProtocolFloor struct {
	Sessions int
	// Rollout is from the first image patch to every session's set
	// running a pod, not terminating, at its new update revision: the
	// criterion of lull's converge (scenario.MovedFrom).
	Rollout time.Duration
	// Reported is from the first image patch to every new pod's stand-in
	// runtime report written (after Rollout: the report follows the pod).
	Reported time.Duration
	// Setup is the creation of the sets and Sessions until every pod runs
	// and has reported; Teardown the deletion of their namespace.
	Setup, Teardown time.Duration
}

// floorTemplate names the template the floor's Sessions refer to. It does
// not exist: lull's controller is stopped while the floor runs, and the
// namespace is gone before it starts again.
const floorTemplate = "protocol-floor"

// measureProtocolFloor runs the protocol's minimal sequence for n sessions
// in namespace ns (see ProtocolFloor), then deletes ns and waits until it
// is gone. The caller stops lull's controller first: it would otherwise
// reconcile the floor's Sessions.
func measureProtocolFloor(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, ns string, n int, timeout time.Duration, out io.Writer) (r ProtocolFloor, err error) {
	r = ProtocolFloor{Sessions: n}
	start := time.Now()
	teardown, err := floorNamespace(ctx, cs, ns, timeout)
	if teardown != nil {
		defer func() {
			var derr error
			if r.Teardown, derr = teardown(); derr != nil && err == nil {
				err = fmt.Errorf("protocol floor: %w", derr)
			}
		}()
	}
	if err != nil {
		return r, fmt.Errorf("protocol floor: %w", err)
	}
	fast := rest.CopyConfig(cfg)
	fast.QPS, fast.Burst = 5000, 5000
	c, err := client.New(fast, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		return r, err
	}

	infCtx, stop := context.WithCancel(ctx)
	defer stop()
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	sets, pods := factory.Apps().V1().StatefulSets(), factory.Core().V1().Pods()
	setInformer, podInformer := sets.Informer(), pods.Informer()
	factory.Start(infCtx.Done())
	sessions, err := crcache.New(fast, crcache.Options{Scheme: manager.Scheme(), DefaultNamespaces: map[string]crcache.Config{ns: {}}})
	if err != nil {
		return r, err
	}
	go func() { _ = sessions.Start(infCtx) }()
	sessionInformer, err := sessions.GetInformer(ctx, &lullv1.Session{})
	if err != nil {
		return r, fmt.Errorf("protocol floor: watch Sessions: %w", err)
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), setInformer.HasSynced, podInformer.HasSynced) || !sessions.WaitForCacheSync(ctx) {
		return r, fmt.Errorf("protocol floor: caches not synced: %w", ctx.Err())
	}
	observe := func() map[string]rawSet {
		s, _ := sets.Lister().StatefulSets(ns).List(labels.Everything())
		p, _ := pods.Lister().Pods(ns).List(labels.Everything())
		return observeRaw(s, p)
	}
	report := func(ctx context.Context, name string, rep lullv1.RuntimeReport) error {
		return patchStatus(ctx, c, ns, name, map[string]any{"runtime": rep})
	}

	if err := forEach(ctx, n, func(i int) error {
		if _, err := cs.AppsV1().StatefulSets(ns).Create(ctx, floorStatefulSet(ns, i, "example.com/floor:v1"), metav1.CreateOptions{}); err != nil {
			return err
		}
		return c.Create(ctx, &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: floorName(i)},
			Spec: lullv1.SessionSpec{TemplateRef: lullv1.TemplateReference{Name: floorTemplate}}})
	}); err != nil {
		return r, fmt.Errorf("protocol floor: create StatefulSets and Sessions: %w", err)
	}
	var before map[string]rawSet
	if err := poll(ctx, 500*time.Millisecond, timeout, func() (bool, error) {
		before = observe()
		return countCurrent(before) == n, nil
	}); err != nil {
		return r, fmt.Errorf("protocol floor: %d of %d pods running: %w", countCurrent(before), n, err)
	}
	// Every runtime has reported Serving for its pod before the rollout,
	// as lull's sessions have when it starts.
	if err := forEach(ctx, n, func(i int) error {
		s := before[floorName(i)]
		return report(ctx, floorName(i), serving(types.UID(s.uid)))
	}); err != nil {
		return r, fmt.Errorf("protocol floor: first reports: %w", err)
	}
	r.Setup = time.Since(start)
	fmt.Fprintf(out, "protocol floor: %d sessions' pods running and reported (%s)\n", n, r.Setup.Round(time.Second))

	// Each step is queued by the watch event that makes it due and carried
	// out by a pool of rawWorkers, once per session.
	type step struct {
		name string
		pod  types.UID
		req  *lullv1.DrainRequest
	}
	requests, drained, deletes, reports := make(chan step, n), make(chan step, n), make(chan step, n), make(chan step, n)
	// One handler goroutine per informer: each map is touched by one.
	requested := map[string]bool{}
	if _, err := setInformer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{UpdateFunc: func(_, o any) {
		s, ok := o.(*appsv1.StatefulSet)
		if !ok || requested[s.Name] {
			return
		}
		old := before[s.Name]
		if s.Status.ObservedGeneration >= s.Generation && s.Status.UpdateRevision != "" && s.Status.UpdateRevision != old.revision {
			requested[s.Name] = true
			requests <- step{name: s.Name, pod: types.UID(old.uid), req: &lullv1.DrainRequest{
				RequestID: drain.RequestID(types.UID(old.uid), lullv1.DrainReasonUpdate, 1), PodUID: types.UID(old.uid),
				Reason: lullv1.DrainReasonUpdate, Revision: s.Status.UpdateRevision, Sequence: 1,
				RequestedAt: metav1.NewTime(time.Now().Truncate(time.Second))}}
		}
	}}); err != nil {
		return r, err
	}
	answered, deleted := map[string]bool{}, map[string]bool{}
	if _, err := sessionInformer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{UpdateFunc: func(_, o any) {
		s, ok := o.(*lullv1.Session)
		if !ok || s.Status.Drain == nil {
			return
		}
		d := s.Status.Drain
		switch {
		case drain.Answers(d, s.Status.Runtime, d.PodUID) && !deleted[s.Name]:
			deleted[s.Name] = true
			deletes <- step{name: s.Name, pod: d.PodUID}
		case !answered[s.Name]:
			// The stand-in runtime answers its request at once: an idle
			// runtime, as the bench's are.
			answered[s.Name] = true
			drained <- step{name: s.Name, pod: d.PodUID, req: d}
		}
	}}); err != nil {
		return r, err
	}
	// A new pod's stand-in runtime reports once the pod runs, whether
	// the informer first sees it Running in its add or in an update.
	started := map[types.UID]bool{}
	onPod := func(o any) {
		p, ok := o.(*corev1.Pod)
		if !ok || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || started[p.UID] {
			return
		}
		owner := metav1.GetControllerOf(p)
		if owner == nil || string(p.UID) == before[owner.Name].uid {
			return
		}
		started[p.UID] = true
		reports <- step{name: owner.Name, pod: p.UID}
	}
	if _, err := podInformer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: onPod, UpdateFunc: func(_, o any) { onPod(o) },
	}); err != nil {
		return r, err
	}

	start = time.Now()
	g, gctx := errgroup.WithContext(ctx)
	pool := func(ch chan step, do func(context.Context, step) error) {
		g.Go(func() error {
			return forEach(gctx, n, func(int) error {
				select {
				case s := <-ch:
					return do(gctx, s)
				case <-gctx.Done():
					return gctx.Err()
				}
			})
		})
	}
	g.Go(func() error {
		return forEach(gctx, n, func(i int) error {
			patch := fmt.Appendf(nil, `{"spec":{"template":{"spec":{"containers":[{"name":"main","image":%q}]}}}}`, "example.com/floor:v2")
			_, err := cs.AppsV1().StatefulSets(ns).Patch(gctx, floorName(i), types.StrategicMergePatchType, patch, metav1.PatchOptions{})
			return err
		})
	})
	pool(requests, func(ctx context.Context, s step) error {
		return patchStatus(ctx, c, ns, s.name, map[string]any{"drain": s.req, "drainSequence": 1})
	})
	pool(drained, func(ctx context.Context, s step) error {
		return report(ctx, s.name, lullv1.RuntimeReport{PodUID: s.pod, RequestID: s.req.RequestID, State: lullv1.RuntimeDrained,
			ReportedAt: ptr.To(metav1.NewTime(time.Now().Truncate(time.Second)))})
	})
	pool(deletes, func(ctx context.Context, s step) error {
		err := cs.CoreV1().Pods(ns).Delete(ctx, before[s.name].pod, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: ptr.To(s.pod)}})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	})
	pool(reports, func(ctx context.Context, s step) error { return report(ctx, s.name, serving(s.pod)) })
	var now map[string]rawSet
	last := ""
	g.Go(func() error {
		return poll(gctx, 250*time.Millisecond, timeout, func() (bool, error) {
			now = observe()
			moved, reported := countMoved(before, now), countReported(gctx, sessions, ns, now)
			if r.Rollout == 0 && moved == n {
				r.Rollout = time.Since(start)
			}
			if line := fmt.Sprintf("protocol floor: %d/%d moved, %d reported", moved, n, reported); line != last {
				fmt.Fprintf(out, "%7.1fs %s\n", time.Since(start).Seconds(), line)
				last = line
			}
			return moved == n && reported == n, nil
		})
	})
	if err := g.Wait(); err != nil {
		return r, fmt.Errorf("protocol floor: %d of %d moved: %w", countMoved(before, now), n, err)
	}
	r.Reported = time.Since(start)
	return r, nil
}

// countReported counts the sessions whose runtime reports Serving for the
// pod their set runs now.
func countReported(ctx context.Context, c client.Reader, ns string, now map[string]rawSet) int {
	var list lullv1.SessionList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return 0
	}
	return reportedFor(list.Items, now)
}

// reportedFor counts the sessions whose runtime reports Serving for the
// running pod of their set in now.
func reportedFor(sessions []lullv1.Session, now map[string]rawSet) int {
	n := 0
	for _, s := range sessions {
		rep, set := s.Status.Runtime, now[s.Name]
		if rep != nil && set.uid != "" && string(rep.PodUID) == set.uid && rep.State == lullv1.RuntimeServing {
			n++
		}
	}
	return n
}

// serving is a stand-in runtime's report of pod accepting turns.
func serving(pod types.UID) lullv1.RuntimeReport {
	return lullv1.RuntimeReport{PodUID: pod, State: lullv1.RuntimeServing, ReportedAt: ptr.To(metav1.NewTime(time.Now().Truncate(time.Second)))}
}

// patchStatus writes fields into a Session's status with a JSON merge
// patch through the status subresource. A report's empty requestID is
// written as null, so a Serving report clears the Drained one's.
func patchStatus(ctx context.Context, c client.Client, ns, name string, fields map[string]any) error {
	status := map[string]any{}
	for k, v := range fields {
		status[k] = v
	}
	if rep, ok := fields["runtime"].(lullv1.RuntimeReport); ok && rep.RequestID == "" {
		raw, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		m := map[string]any{}
		if err := json.Unmarshal(raw, &m); err != nil {
			return err
		}
		m["requestID"] = nil
		status["runtime"] = m
	}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	s := &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	return c.Status().Patch(ctx, s, client.RawPatch(types.MergePatchType, patch))
}

func floorName(i int) string { return fmt.Sprintf("proto-%d", i) }

// floorStatefulSet is the raw rollout's plain StatefulSet under the
// floor's name: nothing of lull's, so the pod runner starts no runtime for
// it and KWOK runs its pod.
func floorStatefulSet(ns string, i int, image string) *appsv1.StatefulSet {
	s := rawStatefulSet(ns, i, image)
	name := floorName(i)
	sel := map[string]string{"app": name}
	s.Name, s.Spec.ServiceName = name, name
	s.Spec.Selector = &metav1.LabelSelector{MatchLabels: sel}
	s.Spec.Template.Labels = sel
	return s
}
