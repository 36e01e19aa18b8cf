package template

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"lull.dev/lull/internal/render"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/files"
)

// The backoff of a refused files ConfigMap create: FilesRetryAfter.
const (
	filesFirstRetry = time.Second
	filesMaxRetry   = 5 * time.Minute
)

// FilesRetryAfter is how long after its n-th refused create in a row
// (n >= 1) a template's files ConfigMap is tried again: 1 s, 2 s, 4 s, …,
// at most 5 minutes. A policy relaxed is noticed by the next try, without
// any change to the template; a ResourceQuota raised or freed makes the
// next try due at once (refusedByQuota).
func FilesRetryAfter(n int) time.Duration {
	d := filesFirstRetry
	for i := 1; i < n && d < filesMaxRetry; i++ {
		d *= 2
	}
	return min(d, filesMaxRetry)
}

// FilesCondition is the template's FilesReady condition after a try to make
// the ConfigMap name of its files exist: err is files.Create's answer (or the
// renderer's, wrapped in filesInvalid), created whether that try created
// it, retryAt when the next try is due after a refusal, prev the condition
// the template has now (nil if none). err must not be transient (see
// transient).
//
// A True condition keeps the reason it has while it names the same
// ConfigMap, so a template whose ConfigMap was Created does not flip to
// Present (and cost a status write) on its next reconcile.
func FilesCondition(t *lullv1.SessionTemplate, name string, created bool, err error, retryAt time.Time, prev *metav1.Condition) metav1.Condition {
	c := metav1.Condition{Type: lullv1.ConditionFilesReady, Status: metav1.ConditionFalse, ObservedGeneration: t.Generation}
	var conflict files.Conflict
	var invalid filesInvalid
	next := retryAt.UTC().Format(time.RFC3339)
	switch {
	case err == nil:
		c.Status, c.Reason = metav1.ConditionTrue, lullv1.ReasonPresent
		c.Message = fmt.Sprintf("ConfigMap %s holds spec.files", name)
		if created {
			c.Reason = lullv1.ReasonCreated
		} else if prev != nil && prev.Status == metav1.ConditionTrue && prev.Message == c.Message {
			c.Reason = prev.Reason
		}
	case errors.As(err, &invalid):
		c.Reason = lullv1.ReasonFilesInvalid
		c.Message = fmt.Sprintf("%v; fix spec.files (sessions keep their running pods)", invalid.err)
	case errors.As(err, &conflict):
		c.Reason = lullv1.ReasonFilesConflict
		c.Message = fmt.Sprintf("%v. Sessions keep their running pods meanwhile; next try at %s", conflict, next)
	default:
		c.Reason = lullv1.ReasonFilesRefused
		c.Message = fmt.Sprintf("the API server refused to create ConfigMap %s: %s; %s. Sessions keep their running pods and move once it exists; next try at %s",
			name, apiMessage(err), refusalFix(err), next)
	}
	return c
}

// transient reports whether err says nothing about the ConfigMap itself (a
// timeout, the API server unavailable, a cancelled request): it goes back
// to the workqueue, whose rate limiter retries it, and changes no
// condition.
func transient(err error) bool {
	var conflict files.Conflict
	return err != nil && !refused(err) && !errors.As(err, &conflict)
}

// refused reports whether err is the API server's answer about the object
// itself (quota, admission, size, validation), which retrying at once
// will not change.
func refused(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsRequestEntityTooLargeError(err)
}

// apiMessage is the API server's own message in err.
func apiMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Message != "" {
		return status.Status().Message
	}
	return err.Error()
}

// refusalFix says what to do about a refused create: a ResourceQuota is
// named by the API server's message ("exceeded quota: <name>, ...").
func refusalFix(err error) string {
	switch msg := apiMessage(err); {
	case strings.Contains(msg, "exceeded quota"):
		return "raise that ResourceQuota's count/configmaps (or configmaps) in the namespace, or delete ConfigMaps it counts that are no longer needed"
	case apierrors.IsRequestEntityTooLargeError(err):
		return "make spec.files smaller"
	default:
		return "an admission policy or webhook refused it: have it allow lull's files ConfigMaps (labelled " + lullv1.LabelFiles + "), or change spec.files"
	}
}

// filesInvalid wraps the renderer's refusal of spec.files.
type filesInvalid struct{ err error }

func (e filesInvalid) Error() string { return e.err.Error() }

// filesBackoff remembers, per template, the files ConfigMap it last tried:
// after a refusal, how many times in a row, when to try again and the
// condition that try produced; after a success, whether this controller
// created it. A template's entry is dropped with the template (forget),
// and a template of another UID that takes its name starts afresh. The
// zero value is ready to use.
type filesBackoff struct {
	mu    sync.Mutex
	tries map[types.NamespacedName]filesTry
}

// filesKey names a template: its key, and its UID.
type filesKey struct {
	types.NamespacedName
	uid types.UID
}

type filesTry struct {
	// uid is the UID of the template tried.
	uid      types.UID
	name     string
	failures int
	next     time.Time
	cond     metav1.Condition
	created  bool
	// woken: a quota change made this try due (retryNow); a refusal of
	// it is tried again after filesFirstRetry, not the grown backoff.
	woken bool
}

// pending returns the last refused try of the ConfigMap name, when its
// next try is still ahead of now.
func (b *filesBackoff) pending(key filesKey, name string, now time.Time) (filesTry, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	tr := b.try(key)
	return tr, tr.name == name && now.Before(tr.next)
}

// try returns the last try of the template key, the zero try if there is
// none (or it was of another template of that name). b.mu is held.
func (b *filesBackoff) try(key filesKey) filesTry {
	if tr, ok := b.tries[key.NamespacedName]; ok && tr.uid == key.uid {
		return tr
	}
	return filesTry{uid: key.uid}
}

// failed records a refused try of the ConfigMap name at now and returns
// when the next one is due. A try of another name (spec.files changed)
// starts the count again.
func (b *filesBackoff) failed(key filesKey, name string, now time.Time) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tries == nil {
		b.tries = map[types.NamespacedName]filesTry{}
	}
	tr := b.try(key)
	if tr.name != name {
		tr = filesTry{uid: key.uid, name: name}
	}
	tr.created = false
	tr.failures++
	tr.next = now.Add(FilesRetryAfter(tr.failures))
	if tr.woken {
		// The API server's quota admission judges against its own cache
		// of ResourceQuotas, which may not yet hold the change that woke
		// this try: one more try soon, then the backoff where it was.
		tr.woken = false
		tr.next = now.Add(filesFirstRetry)
	}
	b.tries[key.NamespacedName] = tr
	return tr.next
}

// remember keeps the condition of the last refused try, for the reconciles
// that come before its retry.
func (b *filesBackoff) remember(key filesKey, c metav1.Condition) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if tr, ok := b.tries[key.NamespacedName]; ok && tr.uid == key.uid {
		tr.cond = c
		b.tries[key.NamespacedName] = tr
	}
}

// succeeded records that the ConfigMap name exists as lull would create
// it, created by this call or not, and reports whether this controller
// created it: a status write that did not land (the write budget, a
// conflict) must not turn Created into Present on the next reconcile.
func (b *filesBackoff) succeeded(key filesKey, name string, created bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tries == nil {
		b.tries = map[types.NamespacedName]filesTry{}
	}
	tr := b.try(key)
	created = created || tr.name == name && tr.created
	b.tries[key.NamespacedName] = filesTry{uid: key.uid, name: name, created: created}
	return created
}

func (b *filesBackoff) forget(key types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.tries, key)
}

// reconcileFiles makes the ConfigMap of the template's current spec.files
// exist (files.Create): this controller is its one writer. It
// returns the FilesReady condition (nil for a template without files) and,
// after a refusal, how long until the next try. Between tries, reconciles
// (every session change brings one) only look in the cache, so a refused
// create is not repeated in a hot loop.
func (r *Reconciler) reconcileFiles(ctx context.Context, t *lullv1.SessionTemplate) (*metav1.Condition, time.Duration, error) {
	key := filesKey{client.ObjectKeyFromObject(t), t.UID}
	prev := meta.FindStatusCondition(t.Status.Conditions, lullv1.ConditionFilesReady)
	desired, err := render.FilesConfigMap(t)
	if desired == nil || err != nil {
		r.files.forget(key.NamespacedName)
		if err == nil {
			return nil, 0, nil
		}
		c := FilesCondition(t, render.FilesConfigMapName(t), false, filesInvalid{err}, time.Time{}, prev)
		return &c, 0, nil
	}
	now := r.now()
	if tr, ok := r.files.pending(key, desired.Name, now); ok {
		cm := &corev1.ConfigMap{}
		if err := r.Client.Get(ctx, client.ObjectKeyFromObject(desired), cm); err != nil || files.Same(cm, desired) != nil {
			return &tr.cond, tr.next.Sub(now), nil
		}
		// Someone created it meanwhile, as lull would have.
	}
	created, err := files.Create(ctx, r.Client, r.reader(), desired)
	if transient(err) {
		return nil, 0, fmt.Errorf("create ConfigMap %s of template %s: %w", desired.Name, t.Name, err)
	}
	if err != nil {
		retryAt := r.files.failed(key, desired.Name, now)
		c := FilesCondition(t, desired.Name, false, err, retryAt, prev)
		r.files.remember(key, c)
		log.FromContext(ctx).Info("files ConfigMap not made", "configMap", desired.Name, "reason", c.Reason, "retryAt", retryAt)
		return &c, retryAt.Sub(now), nil
	}
	c := FilesCondition(t, desired.Name, r.files.succeeded(key, desired.Name, created), nil, time.Time{}, prev)
	if created {
		log.FromContext(ctx).Info("created files ConfigMap", "configMap", desired.Name)
	}
	return &c, 0, nil
}

// setFilesCondition puts c, the FilesReady condition, into st; nil removes
// it (a template without files).
func setFilesCondition(st *lullv1.SessionTemplateStatus, c *metav1.Condition) {
	if c == nil {
		meta.RemoveStatusCondition(&st.Conditions, lullv1.ConditionFilesReady)
		return
	}
	meta.SetStatusCondition(&st.Conditions, *c)
}

// FilesEvent returns the FilesReady condition to record as a Warning Event
// when a status write takes it from before to after: when it turns False,
// or stays False with another reason. Retries, whose messages differ only
// in the time of the next try, record nothing. Nil means no Event.
func FilesEvent(before, after lullv1.SessionTemplateStatus) *metav1.Condition {
	c := meta.FindStatusCondition(after.Conditions, lullv1.ConditionFilesReady)
	if c == nil || c.Status != metav1.ConditionFalse {
		return nil
	}
	if b := meta.FindStatusCondition(before.Conditions, lullv1.ConditionFilesReady); b != nil && b.Status == metav1.ConditionFalse && b.Reason == c.Reason {
		return nil
	}
	return c
}

// filesToTemplate maps a files ConfigMap to its template (its
// lull.dev/template label), so a deleted ConfigMap is made again at once.
func filesToTemplate(_ context.Context, o client.Object) []reconcile.Request {
	name, ok := o.GetLabels()[lullv1.LabelTemplate]
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}
