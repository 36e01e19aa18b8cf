package session

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// recorded is one Event as the reconciler handed it to its recorder.
type recorded struct {
	Type, Reason, Action string
	Related              bool // the session's pod is the Event's related object
	Note                 string
}

func (e recorded) String() string {
	return fmt.Sprintf("%s %s %s related=%t", e.Type, e.Reason, e.Action, e.Related)
}

// eventCapture is a recorder that keeps every Event it is given, in order.
type eventCapture struct{ got []recorded }

func (c *eventCapture) Eventf(_, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	c.got = append(c.got, recorded{Type: eventtype, Reason: reason, Action: action, Related: related != nil, Note: fmt.Sprintf(note, args...)})
}

func (c *eventCapture) AnnotatedEventf(regarding, related runtime.Object, _ map[string]string, eventtype, reason, action, note string, args ...any) {
	c.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

// take returns the Events recorded since the last take.
func (c *eventCapture) take() []string {
	var out []string
	for _, e := range c.got {
		out = append(out, e.String())
	}
	c.got = nil
	return out
}

func capturing(w *world) *eventCapture {
	c := &eventCapture{}
	w.r.Recorder = c
	return c
}

func deletePod(t *testing.T, w *world) {
	t.Helper()
	if err := w.c.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alice-0"}}); err != nil {
		t.Fatal(err)
	}
	w.deletes = nil
}

// Every status write records the Events that follow it, once the write has
// succeeded, in one order: a blocked session's Warning, then the
// session's lifecycle (suspended, resumed), then the rollout step's own
// (the drain request, the update, a stuck pod, a forced suspension). An
// Event of a condition already shown is not recorded again.
func TestStatusWriteRecordsItsEventsInOrder(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(s *lullv1.Session, pod *corev1.Pod)
		before  func(t *testing.T, w *world)
		want    []string
		note    string // a part of the last Event's note
		thenNot bool   // a second reconcile records nothing
	}{{
		name: "a drain request",
		want: []string{"Normal DrainRequested RequestDrain related=true"},
	}, {
		name: "a pod now on the update revision",
		edit: func(s *lullv1.Session, pod *corev1.Pod) {
			pod.Labels[appsv1.ControllerRevisionHashLabelKey] = "alice-new"
			pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
			s.Status.PodName, s.Status.PodUID = pod.Name, pod.UID
			s.Status.CurrentRevision, s.Status.UpdateRevision = "alice-old", "alice-new"
			s.Status.Conditions = []metav1.Condition{{Type: lullv1.ConditionUpToDate, Status: metav1.ConditionFalse, Reason: lullv1.ReasonDraining}}
			s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, State: lullv1.RuntimeServing}
		},
		want:    []string{"Normal Updated Rollout related=true"},
		thenNot: true,
	}, {
		name: "a pod stuck terminating",
		edit: func(_ *lullv1.Session, pod *corev1.Pod) {
			gone := metav1.NewTime(t0.Add(-time.Minute))
			pod.DeletionTimestamp, pod.Finalizers = &gone, []string{"example.com/hold"}
		},
		want:    []string{"Warning PodStuckTerminating Rollout related=true"},
		thenNot: true,
	}, {
		name:    "a missing template",
		before:  deleteTemplate,
		want:    []string{"Warning TemplateNotFound Render related=false"},
		thenNot: true,
	}, {
		name: "a missing template while the suspended session's pod went",
		edit: func(s *lullv1.Session, _ *corev1.Pod) { s.Spec.Suspend = true },
		before: func(t *testing.T, w *world) {
			deletePod(t, w)
			deleteTemplate(t, w)
		},
		want: []string{"Warning TemplateNotFound Render related=false", "Normal Suspended Suspend related=false"},
	}, {
		name: "a resume that asks the stale pod to drain",
		edit: func(s *lullv1.Session, _ *corev1.Pod) { s.Status.Phase = lullv1.SessionSuspended },
		want: []string{"Normal Resumed Resume related=false", "Normal DrainRequested RequestDrain related=true"},
	}, {
		name: "a forced suspension",
		edit: func(s *lullv1.Session, _ *corev1.Pod) {
			s.Spec.Suspend = true
			s.Annotations = map[string]string{lullv1.AnnotationForceUpdate: "true", lullv1.AnnotationForceUpdateReason: "runtime hung"}
		},
		want: []string{"Warning Forced Suspend related=true"},
		note: "(set by unknown; reason: runtime hung)",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, interceptor.Funcs{}, tc.edit)
			if tc.before != nil {
				tc.before(t, w)
			}
			events := capturing(w)
			if _, err := w.reconcile(); err != nil {
				t.Fatal(err)
			}
			last := ""
			if n := len(events.got); n > 0 {
				last = events.got[n-1].Note
			}
			if got := events.take(); !slices.Equal(got, tc.want) {
				t.Fatalf("events = %q, want %q", got, tc.want)
			}
			if !strings.Contains(last, tc.note) {
				t.Errorf("last Event's note %q does not say %q", last, tc.note)
			}
			if !tc.thenNot {
				return
			}
			w.clock.SetTime(t0.Add(time.Second))
			if _, err := w.reconcile(); err != nil {
				t.Fatal(err)
			}
			if got := events.take(); len(got) != 0 {
				t.Errorf("a second reconcile recorded %q, want nothing: the condition already says it", got)
			}
		})
	}
}

// An Event follows only a status write that succeeded: a write refused
// (a newer version of the session, or any other refusal) records nothing,
// on the rollout step's write as on a blocked session's.
func TestNoEventWithoutASuccessfulStatusWrite(t *testing.T) {
	refuse := func(err error) interceptor.Funcs {
		return interceptor.Funcs{SubResourcePatch: func(context.Context, client.Client, string, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
			return err
		}}
	}
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "lull.dev", Resource: "sessions"}, "alice", nil)
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "lull.dev", Resource: "sessions"}, "alice", errString("denied by a webhook"))
	for _, tc := range []struct {
		name    string
		refusal error
		before  func(t *testing.T, w *world)
		wantErr bool
	}{
		{name: "a drain request meeting a newer version", refusal: conflict},
		{name: "a drain request refused", refusal: forbidden, wantErr: true},
		{name: "a blocked session's write refused", refusal: forbidden, before: deleteTemplate, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, refuse(tc.refusal), nil)
			if tc.before != nil {
				tc.before(t, w)
			}
			events := capturing(w)
			res, err := w.reconcile()
			if (err != nil) != tc.wantErr {
				t.Fatalf("reconcile = %v, %v; want an error: %t", res, err, tc.wantErr)
			}
			if !tc.wantErr && res != retryStep {
				t.Errorf("result = %+v, want the step retried (%+v)", res, retryStep)
			}
			if got := events.take(); len(got) != 0 {
				t.Errorf("events = %q after a refused status write, want none", got)
			}
		})
	}
}
