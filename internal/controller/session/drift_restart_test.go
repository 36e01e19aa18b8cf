package session

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Guarantee 5 (review of issue 21): every field lull owns on its objects
// is compared on every reconcile; drift is corrected with an Event.
//
// What tells lull's own StatefulSet spec from another writer's is the
// generation lull's last write left. Held in memory only, it was lost by
// a controller that restarts (a rollout of lull itself, a leader
// failover, an OOM kill) after another writer edited a field outside the
// handful statefulSetDrift compares (the runtime's securityContext, env,
// resources, volumes, command), and before it reconciled that session:
// it compared field by field once, found nothing, and adopted the edited
// generation as its own, keeping the edit (here: the runtime made
// privileged) with no Event. The record is now on the StatefulSet
// (lull.dev/spec-written).
func TestOwnedFieldDriftIsCorrectedAcrossAControllerRestart(t *testing.T) {
	w, _ := driftWorld(t)
	w.handEdit(privileged)
	w.restart() // before its next reconcile of the session
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if isPrivileged(w.statefulSet()) {
		t.Errorf("the runtime container, made privileged by another writer while the controller restarted, stays privileged")
	}
	if n := w.count(lullv1.ReasonDriftCorrected); n != 1 {
		t.Errorf("%s Events = %d, want 1", lullv1.ReasonDriftCorrected, n)
	}
}

func privileged(s *appsv1.StatefulSet) {
	s.Spec.Template.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptrTo(true)}
}

func isPrivileged(s *appsv1.StatefulSet) bool {
	sc := s.Spec.Template.Spec.Containers[0].SecurityContext
	return sc != nil && sc.Privileged != nil && *sc.Privileged
}

// Every kind of write lull makes of a StatefulSet's spec leaves the
// record of it true: the generation the write produced, not the one it
// expected. A write that changes the spec moves the generation once (a
// new render, a suspension's or a catalog hold's change of replicas); one
// that does not moves it not at all (the same render written back with a
// label; a new render admission puts back as it was, and the render
// after it, which the spec already is). A record one above the truth
// would name the generation of another writer's next edit, which a
// restarted controller would then take for lull's own. Each case ends
// with the StatefulSet as lull renders it, so that edit is the only
// difference the restarted controller can find.
func TestEditAfterEachOfLullsWritesIsCorrectedAcrossARestart(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		write func(w *world, freeze func(bool))
		// restoreEvents is how many DriftCorrected Events lull's own
		// writes record (only a restore records one).
		restoreEvents int
	}{
		{name: "a label put back", restoreEvents: 1, write: func(w *world, _ func(bool)) {
			w.handEdit(func(s *appsv1.StatefulSet) { delete(s.Labels, lullv1.LabelTemplate) })
			w.reconcileOK()
		}},
		{name: "a new render", write: func(w *world, _ func(bool)) {
			w.setImage("example.com/agent:3")
			w.reconcileOK()
		}},
		{name: "a new render admission puts back, and the template put back", write: func(w *world, freeze func(bool)) {
			freeze(true)
			w.setImage("example.com/agent:3")
			w.reconcileOK()
			freeze(false)
			w.setImage("example.com/agent:2")
			w.reconcileOK()
		}},
		{name: "a suspension's scale-down and resume", write: func(w *world, _ func(bool)) {
			for _, replicas := range []int32{0, 1} {
				if _, _, err := ensureStatefulSet(ctx, w.c, w.c, w.session(), w.template(), replicas, w.statefulSet().ResourceVersion, t0, &w.r.restores); err != nil {
					w.t.Fatal(err)
				}
			}
		}},
		{name: "a catalog hold's scale-down and resume", write: func(w *world, _ func(bool)) {
			for _, replicas := range []int32{0, 1} {
				if _, err := holdStatefulSet(ctx, w.c, w.c, w.session(), replicas, w.statefulSet().ResourceVersion); err != nil {
					w.t.Fatal(err)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// frozen: admission keeps the stored pod template whatever is
			// written (a policy engine that mutates it back).
			var frozen *corev1.PodTemplateSpec
			w, _ := driftWorldWith(t, func(s *appsv1.StatefulSet) {
				if frozen != nil {
					s.Spec.Template = *frozen.DeepCopy()
				}
			}, interceptor.Funcs{})
			freeze := func(on bool) {
				frozen = nil
				if on {
					frozen = w.statefulSet().Spec.Template.DeepCopy()
				}
			}
			before := w.statefulSet().Generation
			tc.write(w, freeze)
			sts := w.statefulSet()
			if edit, _ := writtenBy(sts); edit != "" {
				t.Fatalf("after lull's own writes (generation %d -> %d): %s", before, sts.Generation, edit)
			}
			if n := w.count(lullv1.ReasonDriftCorrected); n != tc.restoreEvents {
				t.Errorf("lull's own writes recorded %d %s Events, want %d", n, lullv1.ReasonDriftCorrected, tc.restoreEvents)
			}
			w.handEdit(privileged)
			w.restart()
			w.reconcileOK()
			if isPrivileged(w.statefulSet()) {
				t.Errorf("another writer's edit after %s, made while the controller restarted, is kept", tc.name)
			}
			if n := w.count(lullv1.ReasonDriftCorrected); n != 1 {
				t.Errorf("%s Events = %d, want 1", lullv1.ReasonDriftCorrected, n)
			}
		})
	}
}

// A controller that restarts costs no request for a StatefulSet that
// admission rewrote in lull's own write (its image pinned to a digest):
// the record says the spec is lull's, as admission left it. Before it,
// the restarted controller compared the digest with the tag it renders,
// read the StatefulSet from the API server and wrote it back, a write the
// webhook made a no-op: a GET and a PATCH per session at every restart.
func TestRestartCostsNoRequestForAdmissionsFormOfLullsOwnWrite(t *testing.T) {
	w, writes := driftWorldWith(t, digests, interceptor.Funcs{})
	w.setImage("example.com/agent:3")
	w.reconcileOK()
	if got := w.statefulSet().Spec.Template.Spec.Containers[0].Image; got != digestOf("example.com/agent:3") {
		t.Fatalf("image = %s, want admission's digest", got)
	}
	w.eventReasons()
	before := writes.Load()
	for range 2 {
		w.restart()
		var reads atomic.Int32
		w.r.APIReader = statefulSetReads{Reader: w.c, n: &reads}
		w.reconcileOK()
		if n := reads.Load(); n != 0 {
			t.Errorf("a restarted controller read the StatefulSet from the API server %d times", n)
		}
	}
	if n := writes.Load() - before; n != 0 {
		t.Errorf("%d StatefulSet or Service writes by restarted controllers, want 0", n)
	}
	if n := w.count(lullv1.ReasonDriftCorrected); n != 0 {
		t.Errorf("%d %s Events for admission's form of lull's own write", n, lullv1.ReasonDriftCorrected)
	}
}

// statefulSetReads counts the StatefulSets read through it.
type statefulSetReads struct {
	client.Reader
	n *atomic.Int32
}

func (r statefulSetReads) Get(ctx context.Context, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
	if _, ok := o.(*appsv1.StatefulSet); ok {
		r.n.Add(1)
	}
	return r.Reader.Get(ctx, key, o, opts...)
}

// A StatefulSet an older lull created has no record of lull's writes. It
// is written once as lull renders it, which records the write: a
// StatefulSet nobody edited costs that one write and no Event; an edit of
// a field the cache does not keep, made before the upgrade, is undone
// with an Event (the write changed the spec, one generation more than it
// could claim beforehand, so the record is corrected by a second write);
// and neither costs anything at the next restart.
func TestStatefulSetWithoutARecordIsRestoredOnceAndRecorded(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edited bool
		writes int32
	}{{"edited before the upgrade", true, 2}, {"never edited", false, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			w, writes := driftWorld(t)
			w.handEdit(func(s *appsv1.StatefulSet) {
				delete(s.Annotations, lullv1.AnnotationSpecWritten)
				if tc.edited {
					privileged(s)
				}
			})
			w.restart() // the upgraded lull
			w.reconcileOK()
			sts := w.statefulSet()
			if isPrivileged(sts) {
				t.Error("an edit made before the upgrade is kept")
			}
			if edit, _ := writtenBy(sts); edit != "" {
				t.Errorf("after lull's write: %s", edit)
			}
			want := 0
			if tc.edited {
				want = 1
			}
			if n := w.count(lullv1.ReasonDriftCorrected); n != want {
				t.Errorf("%s Events = %d, want %d", lullv1.ReasonDriftCorrected, n, want)
			}
			if n := writes.Load(); n != tc.writes {
				t.Errorf("%d StatefulSet or Service writes, want %d", n, tc.writes)
			}
			w.restart()
			w.reconcileOK()
			if n := writes.Load() - tc.writes; n != 0 {
				t.Errorf("%d more writes at the next restart", n)
			}
		})
	}
}

// A writer that changes the StatefulSet back after each of lull's
// restores (a controller of its own that rewrites pod templates) does not
// hold lull in a loop of restores and Events: the first restore is at
// once, each next one waits twice as long as the last (5 s, 10 s, 20 s,
// …, at most 5 minutes), and while one waits no step is taken on the
// other writer's spec. Before, every reconcile (every write of that
// writer) cost a read, a write and an Event.
func TestStatefulSetChangedBackAfterEachRestoreIsRestoredWithBackoff(t *testing.T) {
	var fighting atomic.Bool
	fighting.Store(true)
	server := apiServerStatefulSets(nil)
	var restores atomic.Int32
	w, _ := driftWorldWith(t, nil, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			if err := server.Patch(ctx, c, o, p, opts...); err != nil {
				return err
			}
			sts, ok := o.(*appsv1.StatefulSet)
			if !ok || isPrivileged(sts) {
				return nil
			}
			restores.Add(1)
			if !fighting.Load() {
				return nil
			}
			// The other writer's change comes right after lull's write.
			again := sts.DeepCopy()
			privileged(again)
			return server.Update(ctx, c, again)
		},
	})
	w.handEdit(privileged)
	start := w.clock.Now()
	var at []time.Duration
	for i := range 60 {
		n := restores.Load()
		result, err := w.reconcile()
		if err != nil {
			t.Fatal(err)
		}
		if restores.Load() > n {
			at = append(at, w.clock.Now().Sub(start))
		} else if i > 0 && result.RequeueAfter <= 0 {
			t.Errorf("at %s: a deferred restore asks for no look again", w.clock.Now().Sub(start))
		}
		w.clock.SetTime(w.clock.Now().Add(time.Second))
	}
	want := []time.Duration{0, 5 * time.Second, 15 * time.Second, 35 * time.Second}
	if len(at) != len(want) {
		t.Fatalf("restores at %v in a minute, want at %v", at, want)
	}
	for i := range want {
		if at[i] != want[i] {
			t.Errorf("restore %d at %s, want %s", i+1, at[i], want[i])
		}
	}
	events := 0
	for _, e := range drainEvents(w) {
		if strings.Contains(e, lullv1.ReasonDriftCorrected) {
			events++
		}
	}
	if events != len(want) {
		t.Errorf("%d %s Events, want one per restore (%d)", events, lullv1.ReasonDriftCorrected, len(want))
	}
	// The other writer stops; lull's next restore holds, and an edit long
	// after it is undone at once.
	fighting.Store(false)
	w.clock.SetTime(start.Add(35*time.Second + 40*time.Second))
	w.reconcileOK()
	if isPrivileged(w.statefulSet()) {
		t.Fatal("not restored once the other writer stopped")
	}
	w.clock.SetTime(w.clock.Now().Add(contestWindow))
	w.handEdit(privileged)
	w.reconcileOK()
	if isPrivileged(w.statefulSet()) {
		t.Error("an edit long after the last restore waits for a backoff")
	}
}

// drainEvents returns the Events recorded since the last look, whole.
func drainEvents(w *world) []string {
	var out []string
	for {
		select {
		case e := <-w.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// The wait before a restore of a StatefulSet another writer keeps
// changing back doubles with each restore in a row, up to 5 minutes, and
// a streak ends once its last restore is contestWindow old.
func TestRestoreWaitsTwiceAsLongAfterEachRestoreInARow(t *testing.T) {
	last := t0
	for _, tc := range []struct {
		n    int
		now  time.Time
		want time.Time
	}{
		{0, t0, t0},
		{1, t0.Add(time.Second), t0.Add(5 * time.Second)},
		{2, t0.Add(time.Second), t0.Add(10 * time.Second)},
		{3, t0.Add(time.Second), t0.Add(20 * time.Second)},
		{7, t0.Add(time.Second), t0.Add(5 * time.Minute)},
		{40, t0.Add(time.Second), t0.Add(5 * time.Minute)},
		{1, t0.Add(time.Minute), t0.Add(5 * time.Second)}, // past: may be written now
		{40, t0.Add(contestWindow), t0.Add(contestWindow)},
	} {
		if got := restoreAt(last, tc.n, tc.now); !got.Equal(tc.want) {
			t.Errorf("restoreAt(last, %d, last+%s) = last+%s, want last+%s", tc.n, tc.now.Sub(last), got.Sub(last), tc.want.Sub(last))
		}
	}
}

// The record of lull's write is read back exactly, with the UID it names
// or none, and nothing else is taken for one.
func TestSpecWrittenRecordRoundTrips(t *testing.T) {
	for _, uid := range []types.UID{"0b6e1c2a-7d3f-4c1e-9a8b-5f4e3d2c1b0a", ""} {
		if g, h, u, ok := parseSpecWritten(formatSpecWritten(7, "3f2a9c0d1e2b4a5c", uid)); !ok || g != 7 || h != "3f2a9c0d1e2b4a5c" || u != uid {
			t.Errorf("parse(format(7, hash, %q)) = %d, %q, %q, %t", uid, g, h, u, ok)
		}
	}
	for _, v := range []string{"", "7", "x/abc", "-1/abc"} {
		if _, _, _, ok := parseSpecWritten(v); ok {
			t.Errorf("%q is taken for a record", v)
		}
	}
}

// A template change made while the restore of a StatefulSet another
// writer keeps changing back waits is written at once: what lull renders
// is new, and it does not wait behind the fight over the old render (up
// to 5 minutes). The fight over the new render is spaced as before.
func TestTemplateChangeDoesNotWaitBehindARestoreFight(t *testing.T) {
	w, _ := driftWorld(t)
	w.handEdit(privileged)
	w.reconcileOK() // restore 1, at once
	w.handEdit(privileged)
	w.reconcileOK() // restore 2 waits 5 s
	if !isPrivileged(w.statefulSet()) {
		t.Fatal("precondition: the second restore waits")
	}
	w.setImage("example.com/agent:3")
	w.reconcileOK()
	sts := w.statefulSet()
	if got := sts.Spec.Template.Spec.Containers[0].Image; got != "example.com/agent:3" || isPrivileged(sts) {
		t.Errorf("a template change made while a restore waits is not written (image %s, privileged %t)", got, isPrivileged(sts))
	}
	w.handEdit(privileged)
	w.reconcileOK()
	if !isPrivileged(w.statefulSet()) {
		t.Errorf("the next restore of the new render, against the same writer, is written at once: the fight over it is not spaced")
	}
}
