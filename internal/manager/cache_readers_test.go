package manager_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"lull.dev/lull/internal/render"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// TestControllersDecideTheSameOnStrippedCache runs the Session reconciler
// and the files sweeper through a session's life (created, its template
// updated with new files and image, the new image refused by the catalog,
// suspended, the old files swept) twice: once reading a cache that holds
// whole objects, once one that holds what the manager's transforms keep.
// Every write, status and Event must be the same: a reader of a field the
// transform cuts, or a write computed from a stripped copy, shows here as
// a difference, whichever function it is in.
func TestControllersDecideTheSameOnStrippedCache(t *testing.T) {
	run := func(strip bool) (*readerWorld, []map[string]string) {
		w := newReaderWorld(t, strip)
		var snaps []map[string]string
		step := func(name string, do func()) {
			w.log = append(w.log, "step "+name)
			do()
			snaps = append(snaps, w.snapshot())
			w.log = append(w.log, w.eventLog()...)
		}
		step("create", func() { w.reconcile("create"); w.reconcile("create again") })
		step("first pod", func() { w.statefulSetController("alice-1"); w.reconcile("running") })
		step("template v2", func() {
			w.editTemplate(func(t *lullv1.SessionTemplate) {
				t.Spec.Template.Spec.Containers[1].Image = "registry.example.com/agent-runtime:v2"
				t.Spec.Files.Items[0].Content = ptr.To("two")
			})
			w.reconcile("render v2")
		})
		step("revision 2 published, drain admitted", func() {
			w.statefulSetController("alice-2")
			w.admit()
			w.clock.SetTime(readerT0.Add(10 * time.Second))
			w.reconcile("drain requested")
		})
		step("sweep while the old pod mounts the old files", func() {
			w.sweep("sweep 1")
			w.clock.SetTime(readerT0.Add(5 * time.Minute))
			w.sweep("sweep 2")
		})
		step("drained and replaced", func() {
			w.reportDrained()
			w.reconcile("commit and delete")
			w.statefulSetController("alice-2")
			w.clock.SetTime(readerT0.Add(6 * time.Minute))
			w.reconcile("new pod")
			w.clock.SetTime(readerT0.Add(7 * time.Minute))
			w.reconcile("settled")
		})
		step("template v3 refused by the catalog", func() {
			w.editTemplate(func(t *lullv1.SessionTemplate) {
				t.Spec.Template.Spec.Containers[1].Image = "registry.example.com/agent-runtime:v3"
				t.Spec.Files.Items[0].Content = ptr.To("three")
			})
			w.reconcile("hold")
		})
		step("suspended while held", func() {
			w.editSession(func(s *lullv1.Session) { s.Spec.Suspend = true })
			w.clock.SetTime(readerT0.Add(8 * time.Minute))
			w.reconcile("suspend: drain requested")
			w.reportDrained()
			w.reconcile("suspend: committed")
			w.reconcile("suspend: scaled to zero")
		})
		step("pod gone, files swept", func() {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice-0"}}
			if err := w.api.Delete(w.ctx(), pod); err != nil {
				t.Fatal(err)
			}
			w.statefulSetController("alice-2") // observes the scale to zero
			w.clock.SetTime(readerT0.Add(10 * time.Minute))
			w.sweep("sweep 3")
			w.clock.SetTime(readerT0.Add(15 * time.Minute))
			w.sweep("sweep 4")
			w.reconcile("suspended")
		})
		return w, snaps
	}
	whole, wholeSnaps := run(false)
	cut, cutSnaps := run(true)

	sameRuns(t, whole, cut, wholeSnaps, cutSnaps)

	// The run proves something only if it went where it was meant to: the
	// StatefulSet was rewritten for v2, held at v2 and scaled to zero, the
	// first files swept and v2's kept while the StatefulSet names it.
	for _, want := range []string{"Normal DrainRequested", "Normal Drained", "Normal Updated", "Normal Suspended"} {
		if !strings.Contains(fmt.Sprint(cut.log), want) {
			t.Errorf("no %q in the run: %q", want, cut.log)
		}
	}
	final := cutSnaps[len(cutSnaps)-1]
	sts := &appsv1.StatefulSet{}
	if err := json.Unmarshal([]byte(final["*v1.StatefulSet alice"]), sts); err != nil {
		t.Fatal(err)
	}
	if ptr.Deref(sts.Spec.Replicas, 1) != 0 || runtimeImageOf(sts) != "registry.example.com/agent-runtime:v2" {
		t.Errorf("StatefulSet at the end: replicas %v, runtime image %q; want 0 and v2 (held)", ptr.Deref(sts.Spec.Replicas, 1), runtimeImageOf(sts))
	}
	if len(sts.Spec.Template.Spec.InitContainers) == 0 || sts.Spec.Template.Spec.TerminationGracePeriodSeconds == nil || len(sts.Spec.VolumeClaimTemplates) != 1 ||
		sts.Spec.VolumeClaimTemplates[0].Spec.StorageClassName == nil {
		t.Errorf("StatefulSet lost the spec the cache does not keep: %+v", sts.Spec)
	}
	var cms []string
	for k := range final {
		if len(k) > len("*v1.ConfigMap ") && k[:len("*v1.ConfigMap ")] == "*v1.ConfigMap " {
			cms = append(cms, k[len("*v1.ConfigMap "):])
		}
	}
	v1, v2, v3 := filesName(t, "one"), filesName(t, "two"), filesName(t, "three")
	have := map[string]bool{}
	for _, n := range cms {
		have[n] = true
	}
	if have[v1] || !have[v2] || !have[v3] {
		t.Errorf("files ConfigMaps at the end: %v; want %s swept, %s (named by the StatefulSet) and %s (current) kept", cms, v1, v2, v3)
	}
	if !mid(cutSnaps, 3)["*v1.ConfigMap "+v1] {
		t.Errorf("the first files were swept while the old pod still mounted them")
	}
}

// TestOwnershipRepairsTheSameOnStrippedCache: a second writer strips the
// owner reference of the session's StatefulSet and Role, takes lull's
// labels off its RoleBinding (so the cache no longer holds it) and binds
// the Role to another ServiceAccount, then deletes the Session with
// --cascade=orphan. The reconciler restores the owners, takes the binding
// back, and reaps the orphans; it must write the same on a stripped cache
// as on whole objects (restoreOwner and ensure patch objects they read,
// and the binding's subjects are cut in the cache).
func TestOwnershipRepairsTheSameOnStrippedCache(t *testing.T) {
	ns := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: "ns", Name: name} }
	rt := lullv1.RuntimeIdentityName("alice")
	steps := []readerStep{
		{"create", func(w *readerWorld) {
			w.reconcile("create")
			w.statefulSetController("alice-1")
			w.reconcile("running")
		}},
		{"owner references stripped", func(w *readerWorld) {
			sts := &appsv1.StatefulSet{ObjectMeta: ns("alice")}
			w.edit(sts, func() { sts.OwnerReferences = nil })
			role := &rbacv1.Role{ObjectMeta: ns(rt)}
			w.edit(role, func() {
				role.OwnerReferences = nil
				role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}})
			})
			w.reconcile("restore owners")
		}},
		{"binding relabelled and rebound", func(w *readerWorld) {
			rb := &rbacv1.RoleBinding{ObjectMeta: ns(rt)}
			w.edit(rb, func() {
				rb.Labels = nil
				rb.Subjects = []rbacv1.Subject{{Kind: "ServiceAccount", Name: "intruder", Namespace: "ns"}}
			})
			w.reconcile("take the binding back")
		}},
		{"session deleted with --cascade=orphan", func(w *readerWorld) {
			if err := w.api.Delete(w.ctx(), &lullv1.Session{ObjectMeta: ns("alice")}); err != nil {
				t.Fatal(err)
			}
			// The garbage collector orphans the dependents: it removes
			// their owner references to the Session.
			for _, o := range []client.Object{&appsv1.StatefulSet{ObjectMeta: ns("alice")}, &corev1.Service{ObjectMeta: ns("alice")},
				&corev1.ServiceAccount{ObjectMeta: ns(rt)}, &rbacv1.Role{ObjectMeta: ns(rt)}, &rbacv1.RoleBinding{ObjectMeta: ns(rt)}} {
				w.edit(o, func() { o.SetOwnerReferences(nil) })
			}
			w.reconcile("reap")
			w.reconcile("reap again")
		}},
	}
	whole, wholeSnaps := runSteps(t, false, steps)
	cut, cutSnaps := runSteps(t, true, steps)
	sameRuns(t, whole, cut, wholeSnaps, cutSnaps)

	// The run went where it was meant to.
	for _, want := range []string{"OwnerReferenceRestored", "OrphanReaped"} {
		if !strings.Contains(fmt.Sprint(cut.log), want) {
			t.Errorf("no %s in the run: %q", want, cut.log)
		}
	}
	role := &rbacv1.Role{}
	if err := json.Unmarshal([]byte(cutSnaps[1]["*v1.Role "+rt]), role); err != nil {
		t.Fatal(err)
	}
	if want := render.Role(&lullv1.Session{ObjectMeta: ns("alice")}).Rules; !equality.Semantic.DeepEqual(role.Rules, want) {
		t.Errorf("Role after the reconcile: rules %+v; want the widening undone: %+v", role.Rules, want)
	}
	rb := &rbacv1.RoleBinding{}
	if err := json.Unmarshal([]byte(cutSnaps[2]["*v1.RoleBinding "+rt]), rb); err != nil {
		t.Fatal(err)
	}
	if len(rb.Subjects) != 1 || rb.Subjects[0].Name != rt || rb.Labels[lullv1.LabelSession] != "alice" {
		t.Errorf("RoleBinding after the reconcile: labels %v, subjects %+v; want lull's labels and the runtime's ServiceAccount", rb.Labels, rb.Subjects)
	}
}
