package cli

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/manager"
)

const idleID = "idle-0123456789abcdef"

// sessionClient returns a fake client holding s, and the patches sent
// through it.
func sessionClient(t *testing.T, s *lullv1.Session) (client.Client, *[]string) {
	t.Helper()
	var patches []string
	c := fake.NewClientBuilder().WithScheme(manager.Scheme()).
		WithObjects(s).WithStatusSubresource(&lullv1.Session{}).
		WithInterceptorFuncs(interceptor.Funcs{
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				data, err := patch.Data(obj)
				if err != nil {
					return err
				}
				if patch.Type() != types.MergePatchType {
					t.Errorf("patch of type %s, want a merge patch", patch.Type())
				}
				patches = append(patches, string(data))
				return c.Patch(ctx, obj, patch, opts...)
			},
		}).Build()
	return c, &patches
}

// testSession is session s1 in ns, running, with an annotation of its own.
func testSession(change func(*lullv1.Session)) *lullv1.Session {
	s := &lullv1.Session{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s1", Annotations: map[string]string{"team": "a"}},
		Spec:       lullv1.SessionSpec{TemplateRef: lullv1.TemplateReference{Name: "tpl"}},
		Status:     lullv1.SessionStatus{Phase: lullv1.SessionRunning, PodUID: "pod-1"},
	}
	if change != nil {
		change(s)
	}
	return s
}

func idleRequest(s *lullv1.Session) {
	s.Status.Drain = &lullv1.DrainRequest{RequestID: idleID, PodUID: "pod-1", Reason: lullv1.DrainReasonIdle}
}

func readSession(t *testing.T, c client.Client) *lullv1.Session {
	t.Helper()
	s := &lullv1.Session{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "s1"}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSuspend(t *testing.T) {
	for _, tc := range []struct {
		name    string
		session *lullv1.Session
		message string
		patches int
	}{
		{"running", testSession(nil), "session ns/s1: suspend requested; its runtime drains first", 1},
		{"suspending", testSession(func(s *lullv1.Session) { s.Spec.Suspend = true }), "session ns/s1: suspend already requested", 0},
		{"suspended", testSession(func(s *lullv1.Session) {
			s.Spec.Suspend, s.Status.Phase = true, lullv1.SessionSuspended
		}), "session ns/s1: already suspended", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, patches := sessionClient(t, tc.session)
			msg, err := suspendSession(context.Background(), c, "ns", "s1")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(msg, tc.message) || strings.Contains(msg, "\n") {
				t.Errorf("message %q, want one line starting %q", msg, tc.message)
			}
			if len(*patches) != tc.patches {
				t.Errorf("patches %q, want %d", *patches, tc.patches)
			}
			if s := readSession(t, c); !s.Spec.Suspend || s.Annotations["team"] != "a" {
				t.Errorf("session after suspend: spec %+v, annotations %v; want suspend and the annotations kept", s.Spec, s.Annotations)
			}
		})
	}
}

func TestResume(t *testing.T) {
	for _, tc := range []struct {
		name      string
		session   *lullv1.Session
		message   string // "" when an error is wanted
		err       string
		keepAlive string // the annotation wanted afterwards
		patches   int
	}{{
		name:    "suspended",
		session: testSession(func(s *lullv1.Session) { s.Spec.Suspend, s.Status.Phase = true, lullv1.SessionSuspended }),
		message: "session ns/s1: resumed",
		patches: 1,
	}, {
		name:      "being culled for inactivity",
		session:   testSession(idleRequest),
		message:   "session ns/s1: idle drain " + idleID + " withdrawn",
		keepAlive: idleID,
		patches:   1,
	}, {
		name: "suspend requested while being culled",
		session: testSession(func(s *lullv1.Session) {
			idleRequest(s)
			s.Spec.Suspend = true
		}),
		message:   "session ns/s1: resumed; idle drain " + idleID + " withdrawn",
		keepAlive: idleID,
		patches:   1,
	}, {
		name: "being culled, a replacement committed for an earlier request",
		session: testSession(func(s *lullv1.Session) {
			idleRequest(s)
			s.Status.Replacement = &lullv1.Replacement{PodUID: "pod-1", Reason: lullv1.ReplacementDrained, RequestID: "update-fedcba9876543210"}
		}),
		message:   "session ns/s1: idle drain " + idleID + " withdrawn",
		keepAlive: idleID,
		patches:   1,
	}, {
		name: "culled: the replacement is committed",
		session: testSession(func(s *lullv1.Session) {
			idleRequest(s)
			s.Status.Replacement = &lullv1.Replacement{PodUID: "pod-1", Reason: lullv1.ReplacementDrained, RequestID: idleID}
		}),
		err: "session ns/s1: too late to keep its pod: the replacement for idle drain " + idleID + " is committed and the session is being suspended; run lull resume again once it shows Suspended",
	}, {
		name: "deleted for inactivity: the replacement is committed",
		session: testSession(func(s *lullv1.Session) {
			idleRequest(s)
			s.Status.Replacement = &lullv1.Replacement{PodUID: "pod-1", Reason: lullv1.ReplacementDrained, RequestID: idleID}
			s.Status.Lifecycle = &lullv1.LifecycleStatus{CullAction: lullv1.IdleDelete}
		}),
		err: "being deleted for inactivity",
	}, {
		name: "an update drain is not kept",
		session: testSession(func(s *lullv1.Session) {
			s.Status.Drain = &lullv1.DrainRequest{RequestID: "update-0123456789abcdef", PodUID: "pod-1", Reason: lullv1.DrainReasonUpdate}
		}),
		message: "session ns/s1: not suspended and not being culled; nothing to resume",
	}, {
		name:    "running",
		session: testSession(nil),
		message: "session ns/s1: not suspended and not being culled; nothing to resume",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c, patches := sessionClient(t, tc.session)
			msg, err := resumeSession(context.Background(), c, "ns", "s1")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("error %v, want %q", err, tc.err)
				}
			} else if err != nil || msg != tc.message {
				t.Errorf("resume = %q, %v; want %q", msg, err, tc.message)
			}
			if len(*patches) != tc.patches {
				t.Errorf("patches %q, want %d (suspend and keep-alive in one)", *patches, tc.patches)
			}
			s := readSession(t, c)
			if s.Spec.Suspend && tc.patches > 0 {
				t.Error("spec.suspend still true after resume")
			}
			if got := s.Annotations[lullv1.AnnotationKeepAlive]; got != tc.keepAlive || s.Annotations["team"] != "a" {
				t.Errorf("annotations %v, want %s=%q and the others kept", s.Annotations, lullv1.AnnotationKeepAlive, tc.keepAlive)
			}
		})
	}
}

func TestSuspendAndResumeNameAMissingSession(t *testing.T) {
	c, _ := sessionClient(t, testSession(nil))
	for name, do := range map[string]func(context.Context, client.Client, string, string) (string, error){
		"suspend": suspendSession,
		"resume":  resumeSession,
	} {
		_, err := do(context.Background(), c, "ns", "s2")
		want := "session ns/s2 not found: check the name, and the namespace (-n)"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s of a missing session: %v, want %q", name, err, want)
		}
	}
}

// Guarantee 5: lull resume during an idle drain withdraws it, and says so
// only if it did. Between the CLI's read and its patch the controller
// commits the drained pod's replacement: the keep-alive then names a
// committed request, which withdraws nothing, and the session is suspended
// all the same. The CLI must not report the drain withdrawn; it re-reads
// and says it is too late.
func TestResumeRacingTheIdleCommitDoesNotClaimAWithdrawal(t *testing.T) {
	s := testSession(idleRequest)
	var patches int
	c := fake.NewClientBuilder().WithScheme(manager.Scheme()).
		WithObjects(s).WithStatusSubresource(&lullv1.Session{}).
		WithInterceptorFuncs(interceptor.Funcs{
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if patches++; patches == 1 {
					// The controller's commitment lands first.
					live := &lullv1.Session{}
					if err := c.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
						return err
					}
					live.Status.Replacement = &lullv1.Replacement{PodUID: "pod-1", Reason: lullv1.ReplacementDrained, RequestID: idleID}
					if err := c.Status().Update(ctx, live); err != nil {
						return err
					}
				}
				return c.Patch(ctx, obj, patch, opts...)
			},
		}).Build()
	msg, err := resumeSession(context.Background(), c, "ns", "s1")
	if err == nil {
		t.Fatalf("resume = %q, nil; the replacement was committed before the keep-alive landed: want the too-late error", msg)
	}
	if !strings.Contains(err.Error(), "too late") {
		t.Fatalf("resume error %v, want the too-late error", err)
	}
}
