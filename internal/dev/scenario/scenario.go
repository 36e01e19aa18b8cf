// Package scenario holds the steps a rollout scenario is made of (create a
// template and sessions, change the runtime, watch the fleet converge), read
// from the API server without trusting lull's own status: revisions come
// from the StatefulSets and pods. The demo, the end-to-end tests and the
// benchmark are written in these steps.
package scenario

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/manager"
	"lull.dev/lull/internal/rollout"
)

// NewClient returns an uncached client that knows lull's types.
func NewClient(cfg *rest.Config) (client.Client, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 200, 400
	return client.New(cfg, client.Options{Scheme: manager.Scheme()})
}

// EnsureNamespace creates a namespace if it does not exist.
func EnsureNamespace(ctx context.Context, c client.Client, name string) error {
	err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// Template returns a SessionTemplate running the reference runtime image
// with the given runtime arguments.
func Template(ns, name, image string, args ...string) *lullv1.SessionTemplate {
	return &lullv1.SessionTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: lullv1.SessionTemplateSpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
				{Name: lullv1.RuntimeContainerName, Image: image, Args: args},
			}}},
			UpdatePolicy: lullv1.UpdatePolicy{Strategy: lullv1.UpdateStrategyDrain},
		},
	}
}

// CreateSessions creates n sessions of a template named <prefix>-<i>.
func CreateSessions(ctx context.Context, c client.Client, ns, template, prefix string, n int) ([]string, error) {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", prefix, i)
		s := &lullv1.Session{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: names[i]},
			Spec:       lullv1.SessionSpec{TemplateRef: lullv1.TemplateReference{Name: template}},
		}
		if err := c.Create(ctx, s); err != nil {
			return nil, fmt.Errorf("create session %s: %w", names[i], err)
		}
	}
	return names, nil
}

// SetImage changes a template's runtime image: a new revision for every
// session of the template.
func SetImage(ctx context.Context, c client.Client, ns, template, image string) error {
	t := &lullv1.SessionTemplate{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: template}, t); err != nil {
		return err
	}
	patch := client.MergeFrom(t.DeepCopy())
	rt := t.RuntimeContainer()
	if rt == nil {
		return fmt.Errorf("SessionTemplate %s has no container named %s", template, lullv1.RuntimeContainerName)
	}
	rt.Image = image
	return c.Patch(ctx, t, patch)
}

// Fleet is the state of a set of sessions, from their StatefulSets, pods
// and drain requests.
type Fleet struct {
	Sessions int
	// Current sessions have a running, non-terminating pod at their
	// StatefulSet's update revision.
	Current int
	// Draining sessions have a drain request outstanding.
	Draining int
	// Revisions counts running pods by template revision (their
	// lull.dev/template-revision label).
	Revisions map[string]int
	// Pods maps session name to its running pod.
	Pods map[string]Pod
}

// Pod is a session's running pod.
type Pod struct {
	UID, Revision string
}

// Converged reports whether every session is current.
func (f Fleet) Converged() bool { return f.Current == f.Sessions }

// Observe reads the fleet's state from c: the API server, or a cache of
// it where reading thousands of objects at every poll would load the API
// server being measured.
func Observe(ctx context.Context, c client.Reader, ns string, names []string) (Fleet, error) {
	f := Fleet{Sessions: len(names), Revisions: map[string]int{}, Pods: map[string]Pod{}}
	var sets appsv1.StatefulSetList
	if err := c.List(ctx, &sets, client.InNamespace(ns), client.HasLabels{lullv1.LabelSession}); err != nil {
		return f, err
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns), client.HasLabels{lullv1.LabelSession}); err != nil {
		return f, err
	}
	var sessions lullv1.SessionList
	if err := c.List(ctx, &sessions, client.InNamespace(ns)); err != nil {
		return f, err
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	update := map[string]string{}
	for _, s := range sets.Items {
		if s.Status.ObservedGeneration >= s.Generation {
			update[s.Name] = s.Status.UpdateRevision
		}
	}
	for _, p := range pods.Items {
		name := p.Labels[lullv1.LabelSession]
		if !want[name] || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		rev := rollout.PodRevision(&p)
		f.Revisions[p.Labels[lullv1.LabelTemplateRevision]]++
		f.Pods[name] = Pod{UID: string(p.UID), Revision: rev}
		if rev != "" && rev == update[name] {
			f.Current++
		}
	}
	for _, s := range sessions.Items {
		if want[s.Name] && s.Status.Drain != nil {
			f.Draining++
		}
	}
	return f, nil
}

// ErrInterrupted is wrapped by the error WaitFor returns when its context
// was canceled (Ctrl-C) rather than timed out.
var ErrInterrupted = errors.New("interrupted")

// WaitFor polls the fleet every interval until done returns true, calling
// tick with each observation; it fails after timeout, or with
// ErrInterrupted once ctx is canceled.
func WaitFor(ctx context.Context, c client.Reader, ns string, names []string, interval, timeout time.Duration, tick func(Fleet), done func(Fleet) bool) (Fleet, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		f, err := Observe(ctx, c, ns, names)
		if err == nil {
			if tick != nil {
				tick(f)
			}
			if done(f) {
				return f, nil
			}
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return f, fmt.Errorf("%w with %d of %d sessions current, %d draining", ErrInterrupted, f.Current, f.Sessions, f.Draining)
			}
			return f, fmt.Errorf("after %s: %d of %d sessions current, %d draining: %w", timeout, f.Current, f.Sessions, f.Draining, ctx.Err())
		case <-time.After(interval):
		}
	}
}

// Interrupted returns err, or ErrInterrupted in its place when ctx was
// canceled (Ctrl-C): a step cut short reports a canceled request or a
// missing result, and the cause worth telling is the interruption.
func Interrupted(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, ErrInterrupted) || !errors.Is(ctx.Err(), context.Canceled) {
		return err
	}
	return ErrInterrupted
}

// Sleep waits for d, or until ctx is done; it returns ErrInterrupted if ctx
// was canceled first, ctx.Err() if it ended otherwise.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return Interrupted(ctx, ctx.Err())
	}
}

// Converged is a WaitFor condition: every session current.
func Converged(f Fleet) bool { return f.Converged() }

// MovedFrom returns a WaitFor condition: every session current, on a
// revision other than the one it ran in before (a rollout has converged, not
// merely not started).
func MovedFrom(before Fleet) func(Fleet) bool {
	return func(f Fleet) bool {
		if !f.Converged() {
			return false
		}
		for name, p := range f.Pods {
			if p.Revision == before.Pods[name].Revision {
				return false
			}
		}
		return true
	}
}

// Launch creates the namespace of t if needed, the template t, and n
// sessions of it named <prefix>-<i>; it returns the session names.
func Launch(ctx context.Context, c client.Client, t *lullv1.SessionTemplate, prefix string, n int) ([]string, error) {
	if err := EnsureNamespace(ctx, c, t.Namespace); err != nil {
		return nil, err
	}
	if err := c.Create(ctx, t); err != nil {
		return nil, fmt.Errorf("create SessionTemplate %s: %w", t.Name, err)
	}
	return CreateSessions(ctx, c, t.Namespace, t.Name, prefix, n)
}
