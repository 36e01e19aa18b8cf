package bench

import (
	"context"
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
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"lull.dev/lull/internal/dev/scenario"
)

// rawWorkers bounds the raw rollout's concurrent requests: as many as keep
// the API server busy on a small machine without queueing in the client.
const rawWorkers = 32

// RawRollout is the floor a rollout is measured against: the same number
// of plain StatefulSets (one pod each, OnDelete, nothing of lull's) whose
// image a plain client changes and whose stale pods it deletes as fast as
// the API server takes them.
type RawRollout struct {
	Sets int
	// Rollout is from the first image patch to every StatefulSet running
	// a non-terminating pod at its new update revision (the criterion of
	// lull's converge, scenario.MovedFrom).
	Rollout time.Duration
	// Setup is the creation of the StatefulSets until every pod runs;
	// Teardown the deletion of their namespace until it is gone.
	Setup, Teardown time.Duration
}

// rawSet is one StatefulSet's state in the raw rollout.
type rawSet struct {
	pod      string // its pod's name
	uid      string // the running pod's UID ("" if none runs)
	revision string // the running pod's revision
	update   string // the set's update revision once observed ("" before)
}

// current reports whether the set runs a pod at its update revision.
func (s rawSet) current() bool { return s.uid != "" && s.update != "" && s.revision == s.update }

// measureRawRollout creates n plain StatefulSets in namespace ns, waits
// until their pods run, then changes every set's image and deletes every
// stale pod (grace period 0, UID precondition) once its set's new update
// revision is published, and times until every set runs a pod at it.
// Then it deletes ns and waits until it is gone, so that nothing of the
// floor burdens what is measured next.
func measureRawRollout(ctx context.Context, cs kubernetes.Interface, ns string, n int, timeout time.Duration, out io.Writer) (r RawRollout, err error) {
	r = RawRollout{Sets: n}
	start := time.Now()
	teardown, err := floorNamespace(ctx, cs, ns, timeout)
	if teardown != nil {
		defer func() {
			var derr error
			if r.Teardown, derr = teardown(); derr != nil && err == nil {
				err = fmt.Errorf("raw rollout: %w", derr)
			}
		}()
	}
	if err != nil {
		return r, fmt.Errorf("raw rollout: %w", err)
	}

	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	sets, pods := factory.Apps().V1().StatefulSets(), factory.Core().V1().Pods()
	setInformer, podInformer := sets.Informer(), pods.Informer()
	infCtx, stop := context.WithCancel(ctx)
	defer stop()
	factory.Start(infCtx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), setInformer.HasSynced, podInformer.HasSynced) {
		return r, fmt.Errorf("raw rollout: caches not synced: %w", ctx.Err())
	}
	observe := func() map[string]rawSet {
		// Listers over the informers' caches: they do not fail.
		s, _ := sets.Lister().StatefulSets(ns).List(labels.Everything())
		p, _ := pods.Lister().Pods(ns).List(labels.Everything())
		return observeRaw(s, p)
	}

	if err := forEach(ctx, n, func(i int) error {
		_, err := cs.AppsV1().StatefulSets(ns).Create(ctx, rawStatefulSet(ns, i, "example.com/raw:v1"), metav1.CreateOptions{})
		return err
	}); err != nil {
		return r, fmt.Errorf("raw rollout: create StatefulSets: %w", err)
	}
	var before map[string]rawSet
	if err := poll(ctx, 500*time.Millisecond, timeout, func() (bool, error) {
		before = observe()
		return countCurrent(before) == n, nil
	}); err != nil {
		return r, fmt.Errorf("raw rollout: %d of %d StatefulSets' pods running: %w", countCurrent(before), n, err)
	}
	r.Setup = time.Since(start)
	fmt.Fprintf(out, "raw rollout floor: %d plain StatefulSets running (%s)\n", n, r.Setup.Round(time.Second))

	// Delete each stale pod as soon as its set's new update revision is
	// published: before that, the StatefulSet controller could recreate
	// the pod from its cache's old template.
	stale := make(chan rawSet, n)
	queued := map[string]bool{}
	enqueue := func(obj any) {
		s, ok := obj.(*appsv1.StatefulSet)
		if !ok || queued[s.Name] {
			return
		}
		old := before[s.Name]
		if s.Status.ObservedGeneration >= s.Generation && s.Status.UpdateRevision != "" && s.Status.UpdateRevision != old.revision {
			queued[s.Name] = true
			stale <- old
		}
	}
	// One handler goroutine per informer: queued needs no lock.
	if _, err := setInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) },
	}); err != nil {
		return r, err
	}
	start = time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return forEach(gctx, n, func(i int) error {
			patch := fmt.Appendf(nil, `{"spec":{"template":{"spec":{"containers":[{"name":"main","image":%q}]}}}}`, "example.com/raw:v2")
			_, err := cs.AppsV1().StatefulSets(ns).Patch(gctx, rawName(i), types.StrategicMergePatchType, patch, metav1.PatchOptions{})
			return err
		})
	})
	g.Go(func() error {
		return forEach(gctx, n, func(int) error {
			var s rawSet
			select {
			case s = <-stale:
			case <-gctx.Done():
				return gctx.Err()
			}
			err := cs.CoreV1().Pods(ns).Delete(gctx, s.pod, metav1.DeleteOptions{
				GracePeriodSeconds: ptr.To[int64](0),
				Preconditions:      &metav1.Preconditions{UID: ptr.To(types.UID(s.uid))},
			})
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				return nil
			}
			return err
		})
	})
	var now map[string]rawSet
	last := ""
	g.Go(func() error {
		return poll(gctx, 250*time.Millisecond, timeout, func() (bool, error) {
			now = observe()
			moved := countMoved(before, now)
			if line := fmt.Sprintf("raw rollout: %d/%d done", moved, n); line != last {
				fmt.Fprintf(out, "%7.1fs %s\n", time.Since(start).Seconds(), line)
				last = line
			}
			return moved == n, nil
		})
	})
	if err := g.Wait(); err != nil {
		return r, fmt.Errorf("raw rollout: %d of %d moved: %w", countMoved(before, now), n, err)
	}
	r.Rollout = time.Since(start)
	return r, nil
}

// observeRaw reads each set's state from the sets and pods of a namespace.
func observeRaw(sets []*appsv1.StatefulSet, pods []*corev1.Pod) map[string]rawSet {
	out := make(map[string]rawSet, len(sets))
	for _, s := range sets {
		rs := rawSet{pod: s.Name + "-0"}
		if s.Status.ObservedGeneration >= s.Generation {
			rs.update = s.Status.UpdateRevision
		}
		out[s.Name] = rs
	}
	for _, p := range pods {
		owner := metav1.GetControllerOf(p)
		if owner == nil || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		if rs, ok := out[owner.Name]; ok && p.Name == rs.pod {
			rs.uid, rs.revision = string(p.UID), p.Labels[appsv1.ControllerRevisionHashLabelKey]
			out[owner.Name] = rs
		}
	}
	return out
}

// countCurrent counts the sets that run a pod at their update revision.
func countCurrent(sets map[string]rawSet) int {
	n := 0
	for _, s := range sets {
		if s.current() {
			n++
		}
	}
	return n
}

// countMoved counts the sets that run a pod at their update revision,
// other than the revision they ran before.
func countMoved(before, now map[string]rawSet) int {
	n := 0
	for name, s := range now {
		if s.current() && s.revision != before[name].revision {
			n++
		}
	}
	return n
}

func rawName(i int) string { return fmt.Sprintf("raw-%d", i) }

// rawStatefulSet is a plain StatefulSet: one pod, OnDelete, no label of
// lull's (the pod runner starts no runtime for it; KWOK runs its pod and
// finishes its deletion, as a kubelet would).
func rawStatefulSet(ns string, i int, image string) *appsv1.StatefulSet {
	name := rawName(i)
	sel := map[string]string{"app": name}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To[int32](1),
			ServiceName:         name,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			UpdateStrategy:      appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType},
			Selector:            &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: image}}},
			},
		},
	}
}

// floorNamespace creates namespace ns for a floor and waits for its
// default ServiceAccount (pods cannot be created before it). teardown
// deletes ns and waits until it is gone, so that nothing of the floor
// burdens what is measured next; it returns how long that took.
func floorNamespace(ctx context.Context, cs kubernetes.Interface, ns string, timeout time.Duration) (teardown func() (time.Duration, error), err error) {
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	teardown = func() (time.Duration, error) {
		t := time.Now()
		err := deleteNamespace(context.WithoutCancel(ctx), cs, ns, timeout)
		return time.Since(t), err
	}
	if err := poll(ctx, 100*time.Millisecond, timeout, func() (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, client404(err)
	}); err != nil {
		return teardown, fmt.Errorf("default ServiceAccount of %s: %w", ns, err)
	}
	return teardown, nil
}

// deleteNamespace deletes ns and waits until it is gone. Its pods are
// deleted with grace period 0 along the way: the namespace controller
// would otherwise wait for each one's graceful end.
func deleteNamespace(ctx context.Context, cs kubernetes.Interface, ns string, timeout time.Duration) error {
	if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return poll(ctx, time.Second, timeout, func() (bool, error) {
		if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return true, nil
		} else if err != nil {
			return false, err
		}
		err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
		return false, client404(err)
	})
}

// forEach runs f(0) … f(n-1) on rawWorkers goroutines; the first error
// stops it.
func forEach(ctx context.Context, n int, f func(i int) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(rawWorkers)
	for i := range n {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error { return f(i) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	// Wait cancels gctx; ctx says whether the caller gave up.
	return ctx.Err()
}

// poll calls done every interval until it returns true or an error, or
// timeout passes.
func poll(ctx context.Context, interval, timeout time.Duration, done func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := done()
		if ok || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", timeout)
		}
		if err := scenario.Sleep(ctx, interval); err != nil {
			return err
		}
	}
}

// client404 is err, except that NotFound is no error.
func client404(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
