// What another writer may have changed on the objects lull renders for a
// session, and how lull tells it from its own changes.

package session

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/render"
)

// missingEntry describes the first entry of want that have lacks or holds
// with another value, as path["key"] ...; "" when have holds all of want.
// Keys are taken in order, so the description is stable.
func missingEntry(path string, have, want map[string]string) string {
	for _, k := range slices.Sorted(maps.Keys(want)) {
		v, ok := have[k]
		switch {
		case !ok:
			return fmt.Sprintf("%s[%q] is missing (renders %q)", path, k, want[k])
		case v != want[k]:
			return fmt.Sprintf("%s[%q] is %q (renders %q)", path, k, v, want[k])
		}
	}
	return ""
}

// statefulSetDrift describes the first field lull renders on a StatefulSet
// that existing holds otherwise than desired, among those a cached copy
// keeps (manager's stripSpec): replicas, update strategy, claim retention,
// the pod template's labels and annotations, and each container's image;
// "" when none differs. Fields the API server defaults and lull leaves
// unset are not compared. It only names the field for the Event: whether
// the spec is lull's is told by its generation (writtenBy), also where the
// cache keeps nothing to compare (the pod template's environment,
// resources, security context, volumes, command).
func statefulSetDrift(existing, desired *appsv1.StatefulSet) string {
	e, d := existing.Spec, desired.Spec
	if have, want := ptr.Deref(e.Replicas, 1), ptr.Deref(d.Replicas, 1); have != want {
		return fmt.Sprintf("spec.replicas is %d (renders %d)", have, want)
	}
	if !equality.Semantic.DeepDerivative(d.UpdateStrategy, e.UpdateStrategy) {
		return fmt.Sprintf("spec.updateStrategy.type is %s (renders %s)", e.UpdateStrategy.Type, d.UpdateStrategy.Type)
	}
	if !equality.Semantic.DeepDerivative(d.PersistentVolumeClaimRetentionPolicy, e.PersistentVolumeClaimRetentionPolicy) {
		return fmt.Sprintf("spec.persistentVolumeClaimRetentionPolicy is %+v (renders %+v)", ptr.Deref(e.PersistentVolumeClaimRetentionPolicy, appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{}), *d.PersistentVolumeClaimRetentionPolicy)
	}
	if f := missingEntry("spec.template.metadata.labels", e.Template.Labels, d.Template.Labels); f != "" {
		return f
	}
	if f := missingEntry("spec.template.metadata.annotations", e.Template.Annotations, d.Template.Annotations); f != "" {
		return f
	}
	if f := imageDrift("initContainers", e.Template.Spec.InitContainers, d.Template.Spec.InitContainers); f != "" {
		return f
	}
	return imageDrift("containers", e.Template.Spec.Containers, d.Template.Spec.Containers)
}

// imageDrift describes the first container of want that have lacks or
// runs another image in; "" when none.
func imageDrift(path string, have, want []corev1.Container) string {
	for _, w := range want {
		i := slices.IndexFunc(have, func(c corev1.Container) bool { return c.Name == w.Name })
		switch {
		case i < 0:
			return fmt.Sprintf("spec.template.spec.%s[%s] is missing", path, w.Name)
		case have[i].Image != w.Image:
			return fmt.Sprintf("spec.template.spec.%s[%s].image is %q (renders %q)", path, w.Name, have[i].Image, w.Image)
		}
	}
	return ""
}

// serviceDrift describes the first field lull renders on a Service that
// existing holds otherwise than desired: the selector, whether not-ready
// addresses are published, and each of lull's ports, found by name, with
// its number, protocol (TCP when unset, as the API server defaults it) and
// target port (the port itself when unset, as the API server defaults it:
// lull renders none, so the pod's port of the same number is the target);
// "" when none differs. Only what lull renders is compared: a port another
// party added (a mesh's metrics port, put there by a mutating webhook on
// every write) is not drift, so it costs no request.
func serviceDrift(existing, desired *corev1.Service) string {
	e, d := existing.Spec, desired.Spec
	if !maps.Equal(e.Selector, d.Selector) {
		return fmt.Sprintf("spec.selector is %v (renders %v)", e.Selector, d.Selector)
	}
	if e.PublishNotReadyAddresses != d.PublishNotReadyAddresses {
		return fmt.Sprintf("spec.publishNotReadyAddresses is %t (renders %t)", e.PublishNotReadyAddresses, d.PublishNotReadyAddresses)
	}
	port := func(p corev1.ServicePort) string {
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
		if p.TargetPort == (intstr.IntOrString{}) {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
		return fmt.Sprintf("%s:%d/%s->%s", p.Name, p.Port, p.Protocol, p.TargetPort.String())
	}
	for _, w := range d.Ports {
		i := slices.IndexFunc(e.Ports, func(p corev1.ServicePort) bool { return p.Name == w.Name })
		switch {
		case i < 0:
			return fmt.Sprintf("spec.ports[%s] is missing (renders %s)", w.Name, port(w))
		case port(e.Ports[i]) != port(w):
			return fmt.Sprintf("spec.ports[%s] is %s (renders %s)", w.Name, port(e.Ports[i]), port(w))
		}
	}
	return ""
}

// servicePorts is lull's ports followed by those of have that another
// party added: a port whose name and number lull renders for none of its
// own. A merge patch replaces the list whole, so writing lull's ports
// back keeps the others'.
func servicePorts(have, lulls []corev1.ServicePort) []corev1.ServicePort {
	out := slices.Clone(lulls)
	for _, p := range have {
		if !slices.ContainsFunc(lulls, func(l corev1.ServicePort) bool { return l.Name == p.Name || l.Port == p.Port }) {
			out = append(out, p)
		}
	}
	return out
}

// grantsDrift describes how what the runtime's identity grants differs
// from what lull renders: a Role's rules, or a RoleBinding's role and
// subjects (the cache keeps them whole: manager's stripSpec); "" when it
// does not. A second writer that widens them must not keep the extra
// permissions.
func grantsDrift(existing, desired any) string {
	switch e := existing.(type) {
	case *rbacv1.Role:
		if !equality.Semantic.DeepEqual(e.Rules, desired.(*rbacv1.Role).Rules) {
			return "rules differ from the runtime's own"
		}
	case *rbacv1.RoleBinding:
		d := desired.(*rbacv1.RoleBinding)
		if e.RoleRef != d.RoleRef || !equality.Semantic.DeepEqual(e.Subjects, d.Subjects) {
			return "roleRef or subjects differ from the runtime's own"
		}
	}
	return ""
}

// writtenBy tells whether sts holds the spec of lull's own last write of
// it, as its lull.dev/spec-written annotation records (see
// lullv1.AnnotationSpecWritten): edit is "" when sts is the object (its
// UID), at the generation, with the spec-hash, that write left, and
// otherwise describes what another writer changed. The API server moves a
// StatefulSet's generation on every change of its spec and on no other,
// so a StatefulSet at lull's generation has the spec lull wrote, as
// admission left it (a webhook that rewrites images to digests): it is
// not compared field by field, which would fight that webhook on every
// reconcile. One at another generation has a spec another writer
// changed, also where the cache keeps nothing to compare, whatever
// spec-hash it carries: a restore of an older copy (a GitOps tool, a
// backup, kubectl apply of a saved manifest) brings that copy's
// spec-hash, and its record, along. At lull's generation, a spec-hash
// other than the recorded one is another writer's edit of the annotation
// alone. A record of another UID was copied from the StatefulSet lull
// wrote onto one created again under its name (kubectl replace --force,
// a backup's restore), which starts again at generation 1: its spec is
// that creator's, whatever generation it is at.
//
// The record is on the object, so every controller process (after a
// restart, a leader failover) judges alike. recorded is false when there
// is none: a StatefulSet an older lull created, which recorded nothing or
// no UID, or one whose record another writer removed. Such a StatefulSet
// is written once as lull renders it (ensureStatefulSet), which records
// it.
func writtenBy(sts *appsv1.StatefulSet) (edit string, recorded bool) {
	value, ok := sts.Annotations[lullv1.AnnotationSpecWritten]
	if !ok {
		return fmt.Sprintf("no record of lull's own write of the spec (metadata.annotations[%q] is missing)", lullv1.AnnotationSpecWritten), false
	}
	generation, hash, uid, ok := parseSpecWritten(value)
	switch have := sts.Annotations[render.AnnotationSpecHash]; {
	case !ok:
		return fmt.Sprintf("metadata.annotations[%q] is %q, not lull's record of its own write", lullv1.AnnotationSpecWritten, value), true
	case uid == "":
		return fmt.Sprintf("no record of lull's own write of this StatefulSet (metadata.annotations[%q] is %q, which names no UID)", lullv1.AnnotationSpecWritten, value), false
	case uid != sts.UID:
		return fmt.Sprintf("created again under its name by another writer (metadata.annotations[%q] records lull's write of UID %s; this StatefulSet is UID %s)", lullv1.AnnotationSpecWritten, uid, sts.UID), true
	case sts.Generation != generation:
		return fmt.Sprintf("spec changed by another writer (generation %d; lull's last write left %d)", sts.Generation, generation), true
	case have != hash:
		return fmt.Sprintf("metadata.annotations[%q] is %q (lull's last write left %q)", render.AnnotationSpecHash, have, hash), true
	}
	return "", true
}

// specWrittenClaim is the lull.dev/spec-written value of a write of the
// spec rendered with hash (its spec-hash annotation) over existing, the
// API server's copy, on which the write is compare-and-swapped (empty
// before a create): the lowest generation the write can produce, with
// existing's UID.
//
//   - a create: 1, and no UID (the API server assigns it);
//   - any other write: existing's generation. A new render may change
//     the spec (generation + 1) or not (admission puts it back whole); a
//     restore may change it or not (another writer may have changed only
//     fields lull does not render, or admission may put its change back).
//
// The response tells which, and a claim it belies (or one without the
// UID) is corrected at once (recordSpecWritten). The claim is never above
// the generation the write produces: a record left one too high (the
// controller stopped, or the correction was lost: a timeout, a webhook
// that refused it once) would name the generation another writer's next
// edit makes, and that edit would be taken for lull's for good. A record
// left too low, or without the UID, only makes the next reconcile write
// lull's own spec back once, which moves no generation and records no
// Event.
func specWrittenClaim(existing *appsv1.StatefulSet, hash string) string {
	if existing.ResourceVersion == "" {
		return formatSpecWritten(1, hash, "")
	}
	return formatSpecWritten(existing.Generation, hash, existing.UID)
}

// formatSpecWritten is the lull.dev/spec-written value of a write of the
// StatefulSet of UID uid that produced generation with spec-hash hash:
// "<generation>/<hash>/<uid>", or "<generation>/<hash>" when the UID is
// not known yet (a create).
func formatSpecWritten(generation int64, hash string, uid types.UID) string {
	value := strconv.FormatInt(generation, 10) + "/" + hash
	if uid != "" {
		value += "/" + string(uid)
	}
	return value
}

// parseSpecWritten reads a lull.dev/spec-written value
// (formatSpecWritten); uid is "" when it names none (a create's claim, or
// an older lull's record); ok is false when it is not one.
func parseSpecWritten(value string) (generation int64, hash string, uid types.UID, ok bool) {
	g, rest, found := strings.Cut(value, "/")
	generation, err := strconv.ParseInt(g, 10, 64)
	if !found || err != nil || generation < 0 {
		return 0, "", "", false
	}
	hash, u, _ := strings.Cut(rest, "/")
	return generation, hash, types.UID(u), true
}

// Restores of an object another writer keeps changing back (a controller
// that rewrites a StatefulSet's spec, or a Service's selector, after each
// of lull's writes; a tool that strips lull's record) are spaced: each
// waits twice as long as the one before it, from firstRestoreWait to
// lastRestoreWait, while each comes within contestWindow of the last.
const (
	firstRestoreWait = 5 * time.Second
	lastRestoreWait  = 5 * time.Minute
	contestWindow    = 10 * time.Minute
)

// restoreAt is when a restore of an object another writer changed may be
// written, after n restores of it in a row of the same render (each within contestWindow of
// the one before), the last at last: at once (now) for the first, or when
// the last is contestWindow old; otherwise last + firstRestoreWait·2^(n-1),
// at most last + lastRestoreWait. A person's edit minutes after lull's
// last restore is undone at once; a writer that changes the object back
// within seconds of each restore meets one restore 5 s later, then 10 s,
// 20 s, …, then one every 5 minutes.
func restoreAt(last time.Time, n int, now time.Time) time.Time {
	if n == 0 || !now.Before(last.Add(contestWindow)) {
		return now
	}
	wait := firstRestoreWait
	for i := 1; i < n && wait < lastRestoreWait; i++ {
		wait *= 2
	}
	return last.Add(min(wait, lastRestoreWait))
}

// errRestoreDeferred is a restore of one of a session's objects that
// waits until at (restoreAt): another writer changed it again soon after
// lull's last restore.
type errRestoreDeferred struct {
	kind, name, drift string
	at                time.Time
	restores          int
}

func (e errRestoreDeferred) Error() string {
	return fmt.Sprintf("%s %s: %s, again, after %d restores in a row: the next restore waits until %s; stop the writer that changes it",
		e.kind, e.name, e.drift, e.restores, e.at.UTC().Format(time.RFC3339))
}

// restoreStreaks remembers, per object lull renders for a session
// (restoreKey), the object's UID, the spec-hash lull last restored it to,
// when lull last restored it after another writer changed it, and how
// many restores in a row that was (see restoreAt). A restore to another
// render (the template changed) is not held by the streak of the last:
// what lull renders is new, and a template change does not wait behind a
// fight over the old one (it still counts in the streak). Every kind ensure keeps shares it. The zero value
// is ready to use; forget drops a session's objects. After a restart the
// next restore is at once.
type restoreStreaks struct {
	mu sync.Mutex
	m  map[restoreKey]restoreStreak
}

// restoreKey names one object of a session: its kind ("StatefulSet",
// "Service", "Role", …), the session, and its name.
type restoreKey struct {
	kind, name string
	session    types.NamespacedName
}

type restoreStreak struct {
	uid      types.UID
	rendered string
	at       time.Time
	n        int
}

// allow returns errRestoreDeferred when a restore of the object key, of
// uid, to the render of spec-hash rendered, undoing drift, must wait; nil
// when it may be written now.
func (r *restoreStreaks) allow(key restoreKey, uid types.UID, rendered, drift string, now time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	last := r.m[key]
	if last.uid != uid || last.rendered != rendered {
		return nil
	}
	if at := restoreAt(last.at, last.n, now); at.After(now) {
		return errRestoreDeferred{kind: key.kind, name: key.name, drift: drift, at: at, restores: last.n}
	}
	return nil
}

// restored records a restore to the render of spec-hash rendered written
// at now, and returns how many in a row it is (1: the first).
func (r *restoreStreaks) restored(key restoreKey, uid types.UID, rendered string, now time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[restoreKey]restoreStreak{}
	}
	last := r.m[key]
	n := 1
	if last.uid == uid && now.Before(last.at.Add(contestWindow)) {
		n = last.n + 1
	}
	r.m[key] = restoreStreak{uid: uid, rendered: rendered, at: now, n: n}
	return n
}

// forget drops the streaks of every object of the session named session.
func (r *restoreStreaks) forget(session types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.m {
		if k.session == session {
			delete(r.m, k)
		}
	}
}
