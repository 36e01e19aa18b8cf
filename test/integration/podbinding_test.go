package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
	"lull.dev/lull/internal/manager"
)

// The extra info the API server gives a ServiceAccount token bound to a pod.
const (
	podUIDExtra  = "authentication.kubernetes.io/pod-uid"
	podNameExtra = "authentication.kubernetes.io/pod-name"
)

// What the admission policy says to a runtime whose token is bound to no
// pod, and to a report whose podUID is not the caller's pod.
const (
	podBoundMessage = "must authenticate with a ServiceAccount token bound to its pod"
	podUIDMessage   = "status.runtime.podUID must be the UID of the pod the caller's token is bound to"
)

// createRuntimePod creates, as admin, a pod of session s that runs as the
// session's runtime ServiceAccount. No node runs it: it exists so that a
// token can be bound to it, as the kubelet binds the token it projects.
func createRuntimePod(t *testing.T, s *lullv1.Session, name string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: name},
		Spec: corev1.PodSpec{
			ServiceAccountName: lullv1.RuntimeIdentityName(s.Name),
			Containers:         []corev1.Container{{Name: "runtime", Image: "example.invalid/runtime:1"}},
		},
	}
	if err := admin.Create(t.Context(), pod); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	return pod
}

// runtimeTokenConfig reaches the API server with a token of session s's
// runtime ServiceAccount from the TokenRequest API, bound to pod as the
// kubelet's projected token is; with a nil pod the token is bound to
// nothing.
func runtimeTokenConfig(t *testing.T, s *lullv1.Session, pod *corev1.Pod) *rest.Config {
	t.Helper()
	cs, err := kubernetes.NewForConfig(adminConfig)
	if err != nil {
		t.Fatal(err)
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := cs.CoreV1().ServiceAccounts(s.Namespace).CreateToken(t.Context(), lullv1.RuntimeIdentityName(s.Name), req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s: %v", lullv1.RuntimeIdentityName(s.Name), err)
	}
	cfg := rest.AnonymousClientConfig(adminConfig)
	cfg.BearerToken = tr.Status.Token
	return cfg
}

// runtimeTokenClient is a client acting as session s's runtime with a token
// bound to pod (to nothing if pod is nil).
func runtimeTokenClient(t *testing.T, s *lullv1.Session, pod *corev1.Pod) client.WithWatch {
	t.Helper()
	c, err := client.NewWithWatch(runtimeTokenConfig(t, s, pod), client.Options{Scheme: manager.Scheme()})
	if err != nil {
		t.Fatalf("runtime client: %v", err)
	}
	return c
}

// TestRuntimePodBinding checks that a runtime's report is bound to the pod
// its token was issued for. Every pod of a session runs as the session's
// ServiceAccount, so RBAC cannot tell the old pod from the new one: the
// admission policy compares status.runtime.podUID with the pod UID the API
// server puts into a pod-bound token's user info.
func TestRuntimePodBinding(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "podbinding")
	ctx := t.Context()

	s := newSession(ns, "sess", "tpl")
	if err := admin.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	createIdentity(t, s)
	// Pod A is the old pod, pod B its replacement; both run as the
	// session's ServiceAccount.
	podA, podB := createRuntimePod(t, s, "sess-old"), createRuntimePod(t, s, "sess-new")
	a, b := runtimeTokenClient(t, s, podA), runtimeTokenClient(t, s, podB)
	unbound := runtimeTokenClient(t, s, nil)
	eventually(t, 10*time.Second, "runtime can get its Session", func(ctx context.Context) error {
		return a.Get(ctx, client.ObjectKeyFromObject(s), &lullv1.Session{})
	})
	waitForPolicy(t, ns)

	report := func(c client.Client, r *lullv1.RuntimeReport) error {
		patch, err := drain.EncodeReport(r)
		if err != nil {
			return fmt.Errorf("encode report: %w", err)
		}
		return c.Status().Patch(ctx, sessionRef(ns, s.Name), client.RawPatch(types.MergePatchType, patch))
	}
	refused := func(t *testing.T, what, message string, do func() error) {
		t.Helper()
		before := mustGetSession(t, ns, s.Name)
		err := do()
		if !apierrors.IsForbidden(err) || !errContains(err, message) {
			t.Errorf("%s: got %v, want 403 Forbidden from the admission policy (%q)", what, err, message)
		}
		assertUnchanged(t, before, mustGetSession(t, ns, s.Name))
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))

	// How the pod UID reaches the policy: the API server authenticates a
	// pod-bound token with the pod's name and UID in the user's extra info.
	// That needs no feature gate (ServiceAccountTokenPodNodeInfo adds the
	// node's name and UID, for a pod on a node).
	t.Run("a pod-bound token carries the pod's UID in the user's extra info", func(t *testing.T) {
		whoami := func(cfg *rest.Config) authenticationv1.UserInfo {
			t.Helper()
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("SelfSubjectReview: %v", err)
			}
			return r.Status.UserInfo
		}
		u := whoami(runtimeTokenConfig(t, s, podA))
		if u.Username != runtimeUser(ns, s.Name) {
			t.Errorf("pod-bound token authenticates as %q, want %q", u.Username, runtimeUser(ns, s.Name))
		}
		if got := u.Extra[podUIDExtra]; !slices.Equal(got, []string{string(podA.UID)}) {
			t.Errorf("extra[%s] = %q, want [%s]; all extra: %v", podUIDExtra, got, podA.UID, u.Extra)
		}
		if got := u.Extra[podNameExtra]; !slices.Equal(got, []string{podA.Name}) {
			t.Errorf("extra[%s] = %q, want [%s]", podNameExtra, got, podA.Name)
		}
		if u := whoami(runtimeTokenConfig(t, s, nil)); len(u.Extra[podUIDExtra]) != 0 {
			t.Errorf("a token bound to no pod has extra[%s] = %q, want none", podUIDExtra, u.Extra[podUIDExtra])
		}
	})

	t.Run("pod A reports as pod A", func(t *testing.T) {
		want := &lullv1.RuntimeReport{PodUID: podA.UID, State: lullv1.RuntimeServing, ActiveTurns: 1, LastActivity: &now, ReportedAt: &now}
		if err := report(a, want); err != nil {
			t.Fatalf("pod A's report with pod A's UID: %v", err)
		}
		if got := mustGetSession(t, ns, s.Name).Status.Runtime; got == nil || got.PodUID != podA.UID || got.ActiveTurns != 1 {
			t.Errorf("status.runtime = %+v, want pod A's report", got)
		}
	})

	t.Run("pod A cannot report as pod B", func(t *testing.T) {
		refused(t, "pod A's token, podUID of pod B", podUIDMessage, func() error {
			return report(a, &lullv1.RuntimeReport{PodUID: podB.UID, State: lullv1.RuntimeServing, ReportedAt: &now})
		})
	})

	t.Run("pod A cannot report an arbitrary pod UID", func(t *testing.T) {
		refused(t, "pod A's token, an arbitrary podUID", podUIDMessage, func() error {
			return report(a, &lullv1.RuntimeReport{PodUID: "00000000-0000-4000-8000-000000000000", State: lullv1.RuntimeServing, ReportedAt: &now})
		})
	})

	t.Run("a pod-bound token cannot write the controller's fields", func(t *testing.T) {
		// The controller's drain request for pod A. Pod A's report is in
		// place, so each patch below passes the podUID rule and is refused
		// for the controller's fields alone.
		reqID := drain.RequestID(podA.UID, lullv1.DrainReasonUpdate, 1)
		if err := admin.Status().Patch(ctx, sessionRef(ns, s.Name), mergePatch(fmt.Sprintf(
			`{"status":{"phase":"Draining","podName":%q,"podUID":%q,"drainSequence":1,"drain":{"requestID":%q,"podUID":%q,"reason":"Update","revision":"rev-2","requestedAt":"2026-01-02T03:04:05Z"}}}`,
			podA.Name, podA.UID, reqID, podA.UID))); err != nil {
			t.Fatal(err)
		}
		replacement := `{"podUID":"` + string(podA.UID) + `","reason":"Drained","requestID":"` + reqID + `","committedAt":"2026-01-02T03:04:05Z"}`
		drained := `{"podUID":"` + string(podA.UID) + `","requestID":"` + reqID + `","state":"Drained","activeTurns":0}`
		patches := []string{
			`{"status":{"drainSequence":2}}`,
			`{"status":{"drainSequence":null}}`,
			`{"status":{"replacement":` + replacement + `}}`, // a key added
			`{"status":{"drain":null}}`,                      // a key removed
			`{"status":{"drain":{"requestID":"` + drain.RequestID(podA.UID, lullv1.DrainReasonManual, 2) + `"}}}`,
			`{"status":{"drain":{"podUID":"` + string(podB.UID) + `"}}}`,
			`{"status":{"podUID":"` + string(podB.UID) + `"}}`,
			`{"status":{"phase":"Running"}}`,
			`{"status":{"runtime":` + drained + `,"drain":null}}`,
			`{"status":{"runtime":` + drained + `,"replacement":` + replacement + `}}`,
			`{"status":null}`,
		}
		for _, p := range patches {
			refused(t, "pod A's token, status patch "+p, policyMessage, func() error {
				return a.Status().Patch(t.Context(), sessionRef(ns, s.Name), mergePatch(p))
			})
		}
		// Once the controller has committed the replacement, pod A can
		// neither withdraw nor rewrite it.
		if err := admin.Status().Patch(ctx, sessionRef(ns, s.Name), mergePatch(`{"status":{"replacement":`+replacement+`}}`)); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{
			`{"status":{"replacement":null}}`,
			`{"status":{"replacement":{"reason":"PodFailed"}}}`,
			`{"status":{"replacement":{"podUID":"` + string(podB.UID) + `"}}}`,
		} {
			refused(t, "pod A's token, status patch "+p, policyMessage, func() error {
				return a.Status().Patch(t.Context(), sessionRef(ns, s.Name), mergePatch(p))
			})
		}
		// The report alone is pod A's to write.
		if err := a.Status().Patch(t.Context(), sessionRef(ns, s.Name), mergePatch(`{"status":{"runtime":`+drained+`}}`)); err != nil {
			t.Errorf("pod A answering its own drain request: %v", err)
		}
	})

	t.Run("the new pod takes over the report", func(t *testing.T) {
		if err := report(b, &lullv1.RuntimeReport{PodUID: podB.UID, State: lullv1.RuntimeServing, ActiveTurns: 2, ReportedAt: &now}); err != nil {
			t.Fatalf("pod B's report with pod B's UID over pod A's: %v", err)
		}
	})

	// The attack the binding stops: the old pod answering the controller's
	// drain request of the new pod, so that the controller deletes the new
	// pod while it holds turns.
	t.Run("the old pod cannot forge a Drained report for the new pod", func(t *testing.T) {
		reqID := drain.RequestID(podB.UID, lullv1.DrainReasonUpdate, 2)
		if err := admin.Status().Patch(ctx, sessionRef(ns, s.Name), mergePatch(fmt.Sprintf(
			`{"status":{"phase":"Draining","podName":%q,"podUID":%q,"drainSequence":2,"drain":{"requestID":%q,"podUID":%q,"reason":"Update","revision":"rev-2","requestedAt":"2026-01-02T03:04:05Z"}}}`,
			podB.Name, podB.UID, reqID, podB.UID))); err != nil {
			t.Fatal(err)
		}
		refused(t, "pod A's token, Drained for pod B", podUIDMessage, func() error {
			return report(a, &lullv1.RuntimeReport{PodUID: podB.UID, RequestID: reqID, State: lullv1.RuntimeDrained, ReportedAt: &now})
		})
		if err := report(b, &lullv1.RuntimeReport{PodUID: podB.UID, RequestID: reqID, State: lullv1.RuntimeDraining, ActiveTurns: 2, ReportedAt: &now}); err != nil {
			t.Errorf("pod B answering its own drain request: %v", err)
		}
	})

	t.Run("a token bound to no pod is refused", func(t *testing.T) {
		for _, uid := range []types.UID{podA.UID, podB.UID} {
			refused(t, "unbound token, podUID "+string(uid), podBoundMessage, func() error {
				return report(unbound, &lullv1.RuntimeReport{PodUID: uid, State: lullv1.RuntimeServing, ReportedAt: &now})
			})
		}
		refused(t, "unbound token, removing status.runtime", podBoundMessage, func() error {
			return unbound.Status().Patch(t.Context(), sessionRef(ns, s.Name), mergePatch(`{"status":{"runtime":null}}`))
		})
		// Impersonating the ServiceAccount without the pod's extra info is
		// no better.
		refused(t, "impersonated runtime without a pod", podBoundMessage, func() error {
			return report(runtimeClient(t, ns, s.Name), &lullv1.RuntimeReport{PodUID: podB.UID, State: lullv1.RuntimeServing, ReportedAt: &now})
		})
	})
}
