package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
)

// policyMessage is what the ValidatingAdmissionPolicy says when a runtime
// writes a status field the controller owns.
const policyMessage = "a runtime may write only status.runtime"

// ownSessionMessage is what it says when a runtime writes another session's
// status.
const ownSessionMessage = "may write only the status of its own session"

// TestRuntimeIdentity acts as a session's runtime, with the ServiceAccount,
// Role and RoleBinding the controller renders and a token bound to the
// session's pod as the kubelet's projected token is, and checks what the API
// server lets it do: RBAC, the status subresource and lull's
// ValidatingAdmissionPolicy together. TestRuntimePodBinding covers the
// report's binding to the pod.
func TestRuntimeIdentity(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "identity")
	ctx := t.Context()

	sa, sb := newSession(ns, "sess-a", "tpl"), newSession(ns, "sess-b", "tpl")
	sa.Labels = map[string]string{"team": "blue"}
	sa.Annotations = map[string]string{"note": "kept"}
	sa.Finalizers = []string{"example.com/keep"}
	for _, s := range []*lullv1.Session{sa, sb} {
		if err := admin.Create(ctx, s); err != nil {
			t.Fatalf("create session %s: %v", s.Name, err)
		}
		createIdentity(t, s)
	}
	// The finalizer would keep sess-a from ever being deleted; nothing
	// deletes it, and the namespace goes away with the API server.

	podA := createRuntimePod(t, sa, sa.Name+"-0")
	a := runtimeTokenClient(t, sa, podA)
	// RBAC reads roles from an informer: wait until A's Role is in force.
	eventually(t, 10*time.Second, "runtime A can get its Session", func(ctx context.Context) error {
		return a.Get(ctx, client.ObjectKeyFromObject(sa), &lullv1.Session{})
	})
	waitForPolicy(t, ns)

	t.Run("get own session", func(t *testing.T) {
		got := &lullv1.Session{}
		if err := a.Get(t.Context(), client.ObjectKeyFromObject(sa), got); err != nil {
			t.Fatalf("get own session: %v", err)
		}
		if got.UID != sa.UID {
			t.Errorf("got session UID %s, want %s", got.UID, sa.UID)
		}
	})

	t.Run("watch own session by name", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		cur := &lullv1.Session{}
		if err := a.Get(ctx, client.ObjectKeyFromObject(sa), cur); err != nil {
			t.Fatal(err)
		}
		w, err := a.Watch(ctx, &lullv1.SessionList{}, client.InNamespace(ns),
			client.MatchingFields{"metadata.name": sa.Name},
			&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: cur.ResourceVersion}})
		if err != nil {
			t.Fatalf("watch own session with fieldSelector metadata.name=%s: %v", sa.Name, err)
		}
		defer w.Stop()
		if err := admin.Patch(ctx, sessionRef(ns, sa.Name), mergePatch(`{"metadata":{"annotations":{"watched":"yes"}}}`)); err != nil {
			t.Fatal(err)
		}
		for {
			select {
			case <-ctx.Done():
				t.Fatal("no watch event for the admin's change")
			case ev, ok := <-w.ResultChan():
				if !ok {
					t.Fatal("watch closed before the admin's change arrived")
				}
				s, isSession := ev.Object.(*lullv1.Session)
				if ev.Type == watch.Error || !isSession {
					t.Fatalf("watch sent %s %T", ev.Type, ev.Object)
				}
				if s.Name != sa.Name {
					t.Fatalf("watch sent session %s, want only %s", s.Name, sa.Name)
				}
				if ev.Type == watch.Modified && s.Annotations["watched"] == "yes" {
					return
				}
			}
		}
	})

	t.Run("report own status.runtime", func(t *testing.T) {
		now := metav1.NewTime(time.Now().Truncate(time.Second))
		report := &lullv1.RuntimeReport{PodUID: podA.UID, State: lullv1.RuntimeServing, ActiveTurns: 2, LastActivity: &now, ReportedAt: &now}
		patch, err := drain.EncodeReport(report)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Status().Patch(t.Context(), sessionRef(ns, sa.Name), client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatalf("patch own status.runtime: %v", err)
		}
		got := mustGetSession(t, ns, sa.Name)
		if !equality.Semantic.DeepEqual(got.Status.Runtime, report) {
			t.Errorf("status.runtime = %+v, want %+v", got.Status.Runtime, report)
		}
	})

	// The refusals below are all RBAC's: 403 Forbidden.
	t.Run("refused", func(t *testing.T) {
		ctx := t.Context()
		reportB, err := drain.EncodeReport(&lullv1.RuntimeReport{PodUID: "pod-b", State: lullv1.RuntimeServing})
		if err != nil {
			t.Fatal(err)
		}
		watchB := func(ctx context.Context) error {
			w, err := a.Watch(ctx, &lullv1.SessionList{}, client.InNamespace(ns), client.MatchingFields{"metadata.name": sb.Name})
			if err == nil {
				w.Stop()
			}
			return err
		}
		watchAll := func(ctx context.Context) error {
			w, err := a.Watch(ctx, &lullv1.SessionList{}, client.InNamespace(ns))
			if err == nil {
				w.Stop()
			}
			return err
		}
		cases := []struct {
			what string
			do   func(ctx context.Context) error
		}{
			{"get session B", func(ctx context.Context) error {
				return a.Get(ctx, client.ObjectKeyFromObject(sb), &lullv1.Session{})
			}},
			{"watch session B", watchB},
			{"patch session B", func(ctx context.Context) error {
				return a.Patch(ctx, sessionRef(ns, sb.Name), mergePatch(`{"metadata":{"labels":{"x":"y"}}}`))
			}},
			{"patch status of session B", func(ctx context.Context) error {
				return a.Status().Patch(ctx, sessionRef(ns, sb.Name), client.RawPatch(types.MergePatchType, reportB))
			}},
			{"patch own spec", func(ctx context.Context) error {
				return a.Patch(ctx, sessionRef(ns, sa.Name), mergePatch(`{"spec":{"suspend":true}}`))
			}},
			{"patch own labels", func(ctx context.Context) error {
				return a.Patch(ctx, sessionRef(ns, sa.Name), mergePatch(`{"metadata":{"labels":{"team":"red"}}}`))
			}},
			{"patch own annotations", func(ctx context.Context) error {
				return a.Patch(ctx, sessionRef(ns, sa.Name), mergePatch(`{"metadata":{"annotations":{"lull.dev/force-update":"true"}}}`))
			}},
			{"patch own finalizers", func(ctx context.Context) error {
				return a.Patch(ctx, sessionRef(ns, sa.Name), mergePatch(`{"metadata":{"finalizers":["evil.example/x"]}}`))
			}},
			{"update own session", func(ctx context.Context) error {
				s := mustGetSession(t, ns, sa.Name)
				s.Spec.Suspend = true
				return a.Update(ctx, s)
			}},
			{"update own status (PUT)", func(ctx context.Context) error {
				s := mustGetSession(t, ns, sa.Name)
				s.Status.Runtime = &lullv1.RuntimeReport{PodUID: podA.UID, State: lullv1.RuntimeServing}
				return a.Status().Update(ctx, s)
			}},
			{"delete own session", func(ctx context.Context) error {
				return a.Delete(ctx, sessionRef(ns, sa.Name))
			}},
			{"list sessions", func(ctx context.Context) error {
				return a.List(ctx, &lullv1.SessionList{}, client.InNamespace(ns))
			}},
			{"watch all sessions", watchAll},
			{"create a session", func(ctx context.Context) error {
				return a.Create(ctx, newSession(ns, "sess-c", "tpl"))
			}},
			{"get a pod", func(ctx context.Context) error {
				return a.Get(ctx, types.NamespacedName{Namespace: ns, Name: sa.Name + "-0"}, &corev1.Pod{})
			}},
			{"list pods", func(ctx context.Context) error {
				return a.List(ctx, &corev1.PodList{}, client.InNamespace(ns))
			}},
			{"get a secret", func(ctx context.Context) error {
				return a.Get(ctx, types.NamespacedName{Namespace: ns, Name: "anything"}, &corev1.Secret{})
			}},
			{"list secrets", func(ctx context.Context) error {
				return a.List(ctx, &corev1.SecretList{}, client.InNamespace(ns))
			}},
			{"get own Role", func(ctx context.Context) error {
				return a.Get(ctx, types.NamespacedName{Namespace: ns, Name: lullv1.RuntimeIdentityName(sa.Name)}, &rbacv1.Role{})
			}},
			{"list templates", func(ctx context.Context) error {
				return a.List(ctx, &lullv1.SessionTemplateList{}, client.InNamespace(ns))
			}},
		}
		before := mustGetSession(t, ns, sb.Name)
		for _, tc := range cases {
			wantForbidden(t, tc.what, tc.do(ctx))
		}
		assertUnchanged(t, before, mustGetSession(t, ns, sb.Name))
	})

	t.Run("status subresource discards metadata and spec", func(t *testing.T) {
		ctx := t.Context()
		patches := []string{
			`{"metadata":{"labels":{"team":"red","evil":"x"}}}`,
			`{"metadata":{"labels":null}}`,
			`{"metadata":{"annotations":{"lull.dev/force-update":"true"}}}`,
			`{"metadata":{"annotations":null}}`,
			`{"metadata":{"finalizers":["evil.example/x"]}}`,
			`{"metadata":{"finalizers":null}}`,
			`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"x","uid":"0000"}]}}`,
			`{"spec":{"suspend":true}}`,
			`{"spec":{"templateRef":{"name":"other"}}}`,
		}
		for _, p := range patches {
			before := mustGetSession(t, ns, sa.Name)
			err := a.Status().Patch(ctx, sessionRef(ns, sa.Name), mergePatch(p))
			if err != nil && !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
				t.Errorf("status patch %s: got %v, want success (change discarded) or a refusal", p, err)
			}
			assertUnchanged(t, before, mustGetSession(t, ns, sa.Name))
		}

		// A real report smuggling metadata and spec changes: the report
		// lands, the rest is discarded.
		before := mustGetSession(t, ns, sa.Name)
		p := `{"metadata":{"labels":{"evil":"x"},"finalizers":["evil.example/x"]},"spec":{"suspend":true},"status":{"runtime":{"podUID":"` + string(podA.UID) + `","state":"Serving","activeTurns":7}}}`
		if err := a.Status().Patch(ctx, sessionRef(ns, sa.Name), mergePatch(p)); err != nil {
			t.Fatalf("status patch %s: %v", p, err)
		}
		want := before.DeepCopy()
		if want.Status.Runtime == nil {
			want.Status.Runtime = &lullv1.RuntimeReport{}
		}
		want.Status.Runtime.PodUID, want.Status.Runtime.State, want.Status.Runtime.ActiveTurns = podA.UID, lullv1.RuntimeServing, 7
		assertUnchanged(t, want, mustGetSession(t, ns, sa.Name))
	})

	t.Run("policy refuses controller-owned status fields", func(t *testing.T) {
		ctx := t.Context()
		// The controller's drain request, as admin.
		reqID := drain.RequestID(podA.UID, lullv1.DrainReasonUpdate, 2)
		req := fmt.Sprintf(`{"requestID":%q,"podUID":%q,"reason":"Update","revision":"rev-2","requestedAt":"2026-01-02T03:04:05Z"}`, reqID, podA.UID)
		if err := admin.Status().Patch(ctx, sessionRef(ns, sa.Name), mergePatch(fmt.Sprintf(`{"status":{"phase":"Draining","podUID":%q,"startedPodUID":%q,"drainSequence":2,"drain":%s}}`, podA.UID, podA.UID, req))); err != nil {
			t.Fatal(err)
		}
		other := drain.RequestID(podA.UID, lullv1.DrainReasonManual, 3)
		replacement := fmt.Sprintf(`{"podUID":%q,"reason":"Drained","requestID":%q,"committedAt":"2026-01-02T03:04:05Z"}`, podA.UID, reqID)
		patches := []string{
			`{"status":{"drain":null}}`, // withdrawing its own drain request
			`{"status":{"drain":{"requestID":"` + other + `"}}}`,
			`{"status":{"drain":{"podUID":"pod-z"}}}`,
			`{"status":{"phase":"Running"}}`,
			`{"status":{"phase":null}}`,
			`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"Fine","message":"","lastTransitionTime":"2026-01-02T03:04:05Z"}]}}`,
			`{"status":{"podUID":"pod-z"}}`,
			`{"status":{"podName":"x-0"}}`,
			`{"status":{"observedGeneration":42}}`,
			`{"status":{"currentRevision":"rev-2"}}`,
			`{"status":{"updateRevision":"rev-1"}}`,
			`{"status":{"failedReplacements":3}}`,
			`{"status":{"lastFailedReplacementTime":"2026-01-02T03:04:05Z"}}`,
			`{"status":{"templateRevision":"rev-9"}}`,
			`{"status":{"drainSequence":3}}`,
			`{"status":{"drainSequence":null}}`,
			`{"status":{"replacement":` + replacement + `}}`,
			// The template controller's revoke of a wave place: a runtime
			// neither revokes one nor, once revoked, takes it back.
			`{"status":{"revokedAdmission":{"sequence":1,"admittedAt":"2026-01-02T03:04:05Z"}}}`,
			// The controller's record that it saw the runtime started:
			// neither erased nor forged by a runtime.
			`{"status":{"startedPodUID":null}}`,
			`{"status":{"startedPodUID":"pod-z"}}`,
			`{"status":{"startedReportTime":"2026-01-02T03:04:05Z"}}`,
			// status.runtime and a controller field at once: all refused.
			`{"status":{"runtime":{"podUID":"` + string(podA.UID) + `","requestID":"` + reqID + `","state":"Drained","activeTurns":0},"drain":null}}`,
			`{"status":null}`,
		}
		for _, p := range patches {
			before := mustGetSession(t, ns, sa.Name)
			err := a.Status().Patch(ctx, sessionRef(ns, sa.Name), mergePatch(p))
			if !apierrors.IsForbidden(err) || !errContains(err, policyMessage) {
				t.Errorf("status patch %s: got %v, want 403 Forbidden from the admission policy (%q)", p, err, policyMessage)
			}
			assertUnchanged(t, before, mustGetSession(t, ns, sa.Name))
		}

		// The runtime answering the request, status.runtime only, is allowed.
		patch, err := drain.EncodeReport(&lullv1.RuntimeReport{PodUID: podA.UID, RequestID: reqID, State: lullv1.RuntimeDrained})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Status().Patch(ctx, sessionRef(ns, sa.Name), client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Errorf("Drained report with a drain request outstanding: %v", err)
		}
		got := mustGetSession(t, ns, sa.Name)
		if got.Status.Drain == nil || got.Status.Runtime == nil || got.Status.Runtime.State != lullv1.RuntimeDrained {
			t.Errorf("after the Drained report: drain %+v, runtime %+v", got.Status.Drain, got.Status.Runtime)
		}
		// Clearing its report is the runtime's business: the controller
		// deletes a pod only on a matching Drained report, never for want
		// of one.
		if err := a.Status().Patch(ctx, sessionRef(ns, sa.Name), mergePatch(`{"status":{"runtime":null}}`)); err != nil {
			t.Errorf("clearing status.runtime: %v", err)
		}
	})

	// Last: it widens A's permissions.
	t.Run("policy refuses another session's status even when RBAC allows it", func(t *testing.T) {
		ctx := t.Context()
		name := "extra-status-b-for-a"
		role := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{lullv1.GroupVersion.Group}, Resources: []string{"sessions", "sessions/status"},
				ResourceNames: []string{sb.Name}, Verbs: []string{"get", "patch"}}},
		}
		binding := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: lullv1.RuntimeIdentityName(sa.Name)}},
		}
		for _, o := range []client.Object{role, binding} {
			if err := admin.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() {
			_ = admin.Delete(context.Background(), binding)
			_ = admin.Delete(context.Background(), role)
		})
		// The extra grant is in force once A may get B.
		eventually(t, 10*time.Second, "extra Role lets runtime A get session B", func(ctx context.Context) error {
			return a.Get(ctx, client.ObjectKeyFromObject(sb), &lullv1.Session{})
		})

		before := mustGetSession(t, ns, sb.Name)
		patch, err := drain.EncodeReport(&lullv1.RuntimeReport{PodUID: podA.UID, State: lullv1.RuntimeServing})
		if err != nil {
			t.Fatal(err)
		}
		err = a.Status().Patch(ctx, sessionRef(ns, sb.Name), client.RawPatch(types.MergePatchType, patch))
		if !apierrors.IsForbidden(err) || !errContains(err, ownSessionMessage, runtimeUser(ns, sa.Name)) {
			t.Errorf("runtime A patching B's status.runtime: got %v, want 403 Forbidden from the admission policy (%q)", err, ownSessionMessage)
		}
		assertUnchanged(t, before, mustGetSession(t, ns, sb.Name))
	})
}

// waitForPolicy waits until the admission policy is in force: until it
// refuses a runtime's write to a controller-owned status field with a token
// bound to no pod (an impersonated ServiceAccount carries no pod). The policy
// is type-checked and loaded asynchronously after it is created; until then
// such writes succeed, so the probe uses a session of its own.
func waitForPolicy(t *testing.T, ns string) {
	t.Helper()
	probe := newSession(ns, "policy-probe", "tpl")
	if err := admin.Create(t.Context(), probe); err != nil {
		t.Fatal(err)
	}
	createIdentity(t, probe)
	c := runtimeClient(t, ns, probe.Name)
	n := 0
	eventually(t, 30*time.Second, "admission policy refuses an unbound runtime's write to status.observedGeneration", func(ctx context.Context) error {
		n++
		err := c.Status().Patch(ctx, sessionRef(ns, probe.Name), mergePatch(fmt.Sprintf(`{"status":{"observedGeneration":%d}}`, n)))
		switch {
		case err == nil:
			return errUnexpectedSuccess
		case errContains(err, podBoundMessage):
			return nil
		default:
			return err // RBAC not yet in force, or the policy not yet loaded
		}
	})
}

// assertUnchanged fails the test if after differs from before in the
// session's spec, status, labels, annotations, finalizers or owners.
func assertUnchanged(t *testing.T, before, after *lullv1.Session) {
	t.Helper()
	type view struct {
		Labels, Annotations map[string]string
		Finalizers          []string
		Owners              []metav1.OwnerReference
		Spec                lullv1.SessionSpec
		Status              lullv1.SessionStatus
	}
	v := func(s *lullv1.Session) view {
		return view{s.Labels, s.Annotations, s.Finalizers, s.OwnerReferences, s.Spec, s.Status}
	}
	if b, a := v(before), v(after); !equality.Semantic.DeepEqual(b, a) {
		bj, _ := json.Marshal(b)
		aj, _ := json.Marshal(a)
		t.Errorf("session %s changed:\nbefore %s\nafter  %s", before.Name, bj, aj)
	}
}
