package e2e

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"lull.dev/lull/internal/render"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/scenario"
)

// The files sweeper under a stream of file changes (the e2e controller
// sweeps every second with a 2 s grace): three busy sessions get 20 new
// contents, each rolled out drained, and the controller is killed and
// started again in the middle. A watcher records every delete of a files
// ConfigMap; none may happen while a pod (terminating ones included) mounts
// it or a StatefulSet references it. After the last rollout the only files
// ConfigMap left is the current one.
func TestFilesSweptOnlyWhenUnneeded(t *testing.T) {
	const changes = 20
	files := func(i int) *lullv1.Files {
		return &lullv1.Files{MountPath: "/etc/runtime", Items: []lullv1.FileItem{{Name: "config.yaml", Content: ptr.To(fmt.Sprintf("revision: %d\n", i))}}}
	}
	all := intstr.FromString("100%")
	ns, names, before := setupTemplate(t, 3, func(t *lullv1.SessionTemplate) {
		t.Spec.Files = files(0)
		t.Spec.UpdatePolicy = lullv1.UpdatePolicy{Strategy: lullv1.UpdateStrategyDrain, MaxUnavailable: &all}
	}, "--turn-min=100ms", "--turn-max=500ms", "--think-max=200ms")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := watchSweeps(ctx, t, ns)

	key := types.NamespacedName{Namespace: ns, Name: "rt"}
	prev := before
	for i := 1; i <= changes; i++ {
		if i == changes/2 {
			// A restart: the new process has seen no ConfigMap, so it sweeps
			// nothing for a grace period, and it must judge what the old
			// one left half done.
			env.KillController()
			t.Cleanup(func() {
				if env.ControllerPID() == 0 {
					_ = env.StartController(context.Background())
				}
			})
		}
		tmpl := &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		edit(t, tmpl, func(tmpl *lullv1.SessionTemplate) { tmpl.Spec.Files = files(i) })
		if i == changes/2 {
			time.Sleep(500 * time.Millisecond)
			if err := env.StartController(ctx); err != nil {
				t.Fatal(err)
			}
		}
		next, err := scenario.WaitFor(ctx, c, ns, names, 100*time.Millisecond, 30*time.Second, nil, scenario.MovedFrom(prev))
		if err != nil {
			t.Fatalf("change %d did not roll out: %v", i, err)
		}
		prev = next
	}

	tmpl := &lullv1.SessionTemplate{}
	if err := c.Get(ctx, key, tmpl); err != nil {
		t.Fatal(err)
	}
	current := render.FilesConfigMapName(tmpl)
	eventually(t, 30*time.Second, "only the current files ConfigMap is left", func() error {
		var cms corev1.ConfigMapList
		if err := c.List(ctx, &cms, client.InNamespace(ns), client.HasLabels{lullv1.LabelFiles}); err != nil {
			return err
		}
		var left []string
		for _, cm := range cms.Items {
			if cm.Name != current {
				left = append(left, cm.Name)
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("%d left besides %s: %v", len(left), current, left)
		}
		if len(cms.Items) != 1 {
			return fmt.Errorf("the current files ConfigMap %s is missing", current)
		}
		return nil
	})
	// The API server shows the deletes before this test's own watch has
	// delivered them: wait for the watch (it counts them) before stopping
	// it, or a delete still in flight would be missed.
	eventually(t, 10*time.Second, "the watch has seen every delete", func() error {
		if n := w.deleteCount(); n < changes {
			return fmt.Errorf("%d deletes seen so far, want %d", n, changes)
		}
		return nil
	})
	cancel()
	deletes, violations := w.verdict()
	for _, v := range violations {
		t.Error(v)
	}
	if deletes != changes {
		t.Errorf("%d files ConfigMaps deleted, want %d (every content but the current one)", deletes, changes)
	}
	t.Logf("%d files ConfigMaps swept across %d rollouts and a controller restart", deletes, changes)
}

// sweepWatch records, from watches of its own, the history of every pod and
// StatefulSet of a namespace (which files ConfigMaps each names, from which
// resourceVersion on) and every delete of a files ConfigMap. At each delete
// it lists the namespace's pods and StatefulSets from the API server; at the
// end it replays the history: at the delete's resourceVersion, no object
// alive then may name the ConfigMap. Replaying by resourceVersion is what
// makes the watch-fed view exact: separate watches deliver in their own
// order, but etcd orders every write (comparing resourceVersions as numbers
// holds for the etcd of the local control plane).
type sweepWatch struct {
	mu         sync.Mutex
	history    map[string][]state // by kind/name
	deletes    []deleted
	violations []string
	done       sync.WaitGroup
}

// state is what an object named from rv on.
type state struct {
	rv    int64
	alive bool
	names []string
}

type deleted struct {
	name string
	rv   int64
}

func watchSweeps(ctx context.Context, t *testing.T, ns string) *sweepWatch {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	w := &sweepWatch{history: map[string][]state{}}
	pods := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return cs.CoreV1().Pods(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cs.CoreV1().Pods(ns).Watch(ctx, o)
		},
	}
	sets := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return cs.AppsV1().StatefulSets(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cs.AppsV1().StatefulSets(ns).Watch(ctx, o)
		},
	}
	files := metav1.ListOptions{LabelSelector: lullv1.LabelFiles}
	cms := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = files.LabelSelector
			return cs.CoreV1().ConfigMaps(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = files.LabelSelector
			return cs.CoreV1().ConfigMaps(ns).Watch(ctx, o)
		},
	}
	podList, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range podList.Items {
		w.record("Pod", &podList.Items[i], true, namedBy(&podList.Items[i].Spec))
	}
	setList, err := cs.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range setList.Items {
		w.record("StatefulSet", &setList.Items[i], true, namedBy(&setList.Items[i].Spec.Template.Spec))
	}
	cmList, err := cs.CoreV1().ConfigMaps(ns).List(ctx, files)
	if err != nil {
		t.Fatal(err)
	}
	follow := func(lw *cache.ListWatch, rv string, handle func(watch.Event)) {
		rw, err := watchtools.NewRetryWatcherWithContext(ctx, rv, lw)
		if err != nil {
			t.Fatal(err)
		}
		w.done.Add(1)
		go func() {
			defer w.done.Done()
			defer rw.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case e, ok := <-rw.ResultChan():
					if !ok {
						return
					}
					handle(e)
				}
			}
		}()
	}
	follow(pods, podList.ResourceVersion, func(e watch.Event) {
		if p, ok := e.Object.(*corev1.Pod); ok {
			w.record("Pod", p, e.Type != watch.Deleted, namedBy(&p.Spec))
		}
	})
	follow(sets, setList.ResourceVersion, func(e watch.Event) {
		if s, ok := e.Object.(*appsv1.StatefulSet); ok {
			w.record("StatefulSet", s, e.Type != watch.Deleted, namedBy(&s.Spec.Template.Spec))
		}
	})
	follow(cms, cmList.ResourceVersion, func(e watch.Event) {
		cm, ok := e.Object.(*corev1.ConfigMap)
		if !ok || e.Type != watch.Deleted {
			return
		}
		w.mu.Lock()
		w.deletes = append(w.deletes, deleted{name: cm.Name, rv: rvOf(cm)})
		w.mu.Unlock()
		// The live view, at once: a pod or StatefulSet naming a deleted
		// ConfigMap (no content comes back in this test, so none may).
		var why []string
		if live, err := cs.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{}); err == nil {
			for _, s := range live.Items {
				if slices.Contains(namedBy(&s.Spec.Template.Spec), cm.Name) {
					why = append(why, "StatefulSet "+s.Name)
				}
			}
		}
		if live, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
			for _, p := range live.Items {
				if slices.Contains(namedBy(&p.Spec), cm.Name) {
					why = append(why, fmt.Sprintf("pod %s (terminating: %v)", p.Name, p.DeletionTimestamp != nil))
				}
			}
		}
		if len(why) > 0 {
			if _, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, cm.Name, metav1.GetOptions{}); err == nil {
				// Created again by a session (touchFiles) since: what
				// names it names one that exists. The replay below still
				// judges the moment of the delete.
				return
			}
			w.mu.Lock()
			w.violations = append(w.violations, fmt.Sprintf("ConfigMap %s deleted while the API server lists %v naming it", cm.Name, why))
			w.mu.Unlock()
		}
	})
	return w
}

func (w *sweepWatch) record(kind string, o metav1.Object, alive bool, names []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := kind + "/" + o.GetName()
	w.history[k] = append(w.history[k], state{rv: rvOf(o), alive: alive, names: names})
}

// verdict waits for the watches to stop (cancel their context first) and
// returns the number of deletes and every violation, live and replayed.
// deleteCount is how many deletes of files ConfigMaps the watch has
// delivered so far.
func (w *sweepWatch) deleteCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.deletes)
}

func (w *sweepWatch) verdict() (int, []string) {
	w.done.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	out := slices.Clone(w.violations)
	for _, d := range w.deletes {
		for k, states := range w.history {
			// The state in force at d.rv: the last one written at or before.
			slices.SortFunc(states, func(a, b state) int { return cmp.Compare(a.rv, b.rv) })
			var at *state
			for i := range states {
				if states[i].rv <= d.rv {
					at = &states[i]
				}
			}
			if at != nil && at.alive && slices.Contains(at.names, d.name) {
				out = append(out, fmt.Sprintf("ConfigMap %s deleted at resourceVersion %d while %s (version %d) named it", d.name, d.rv, k, at.rv))
			}
		}
	}
	return len(w.deletes), out
}

func rvOf(o metav1.Object) int64 {
	rv, _ := strconv.ParseInt(o.GetResourceVersion(), 10, 64)
	return rv
}

// namedBy lists the ConfigMaps a pod spec mounts (configMap volumes and
// projected sources).
func namedBy(spec *corev1.PodSpec) []string {
	var out []string
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil {
			out = append(out, v.ConfigMap.Name)
		}
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil {
					out = append(out, s.ConfigMap.Name)
				}
			}
		}
	}
	return out
}
