package integration

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// TestCRDValidation checks that the API server refuses bad SessionTemplates
// and Sessions with an Invalid error whose message names the field, and
// accepts and defaults good ones.
func TestCRDValidation(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "validation")
	ctx := t.Context()

	// An existing session, for the update cases.
	existing := newSession(ns, "existing", "tpl")
	if err := admin.Create(ctx, existing); err != nil {
		t.Fatalf("create session: %v", err)
	}

	withEnv := newTemplate(ns, "bad-env", "example.com/rt:v1")
	withEnv.Spec.Runtime.Env = []corev1.EnvVar{{Name: "OK", Value: "1"}, {Name: "LULL_X", Value: "1"}}
	twoPorts := newTemplate(ns, "two-ports", "example.com/rt:v1")
	twoPorts.Spec.Runtime.Ports = []corev1.ContainerPort{{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}, {ContainerPort: 9090, Protocol: corev1.ProtocolTCP}}
	badStrategy := newTemplate(ns, "bad-strategy", "example.com/rt:v1")
	badStrategy.Spec.UpdatePolicy.Strategy = "Sometimes"

	cases := []struct {
		name string
		// write makes the refused request.
		write func(ctx context.Context) error
		// field is the path the message must name; also holds the rule's
		// message where there is one.
		field []string
	}{
		{
			name:  "template with empty image",
			write: create(newTemplate(ns, "empty-image", "")),
			field: []string{"spec.runtime.image"},
		},
		{
			name:  "template with a space in the image",
			write: create(newTemplate(ns, "space-image", "example.com/rt: v1")),
			field: []string{"spec.runtime.image", "must not contain whitespace"},
		},
		{
			name:  "template with a tab and a newline in the image",
			write: create(newTemplate(ns, "tab-image", "a\tb\n")),
			field: []string{"spec.runtime.image", "must not contain whitespace"},
		},
		{
			name:  "template with two unnamed ports",
			write: create(twoPorts),
			field: []string{"spec.runtime.ports", "every port needs a name"},
		},
		{
			name:  "template name longer than 63 characters",
			write: create(newTemplate(ns, strings.Repeat("t", 64), "example.com/rt:v1")),
			field: []string{"metadata.name", "at most 63 characters"},
		},
		{
			name:  "template with an unknown update strategy",
			write: create(badStrategy),
			field: []string{"spec.updatePolicy.strategy", `"Sometimes"`},
		},
		{
			name:  "template with a LULL_ env var",
			write: create(withEnv),
			field: []string{"spec.runtime.env", "reserved for lull"},
		},
		{
			name: "session without templateRef",
			write: func(ctx context.Context) error {
				u := &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": lullv1.GroupVersion.String(), "kind": "Session",
					"metadata": map[string]any{"name": "no-template", "namespace": ns},
					"spec":     map[string]any{"suspend": true},
				}}
				return admin.Create(ctx, u)
			},
			field: []string{"spec.templateRef", "Required value"},
		},
		{
			name:  "session with an empty templateRef name",
			write: create(newSession(ns, "empty-template", "")),
			field: []string{"spec.templateRef.name"},
		},
		{
			name: "changing templateRef of an existing session",
			write: func(ctx context.Context) error {
				return admin.Patch(ctx, sessionRef(ns, existing.Name), mergePatch(`{"spec":{"templateRef":{"name":"other"}}}`))
			},
			field: []string{"spec.templateRef", "immutable"},
		},
		{
			name:  "session name longer than 52 characters",
			write: create(newSession(ns, "s"+strings.Repeat("a", 52), "tpl")),
			field: []string{"metadata.name", "at most 52 characters"},
		},
		{
			name:  "session name that is not a DNS-1035 label",
			write: create(newSession(ns, "1-starts-with-a-digit", "tpl")),
			field: []string{"metadata.name", "DNS-1035"},
		},
		{
			name: "status with an unknown drain reason",
			write: func(ctx context.Context) error {
				return admin.Status().Patch(ctx, sessionRef(ns, existing.Name), mergePatch(
					`{"status":{"drain":{"requestID":"update-0123456789abcdef","podUID":"p","reason":"Boredom","requestedAt":"2026-01-02T03:04:05Z"}}}`))
			},
			field: []string{"status.drain.reason", `"Boredom"`},
		},
		{
			name: "status with an unknown runtime state",
			write: func(ctx context.Context) error {
				return admin.Status().Patch(ctx, sessionRef(ns, existing.Name), mergePatch(
					`{"status":{"runtime":{"podUID":"p","state":"Napping","activeTurns":0}}}`))
			},
			field: []string{"status.runtime.state", `"Napping"`},
		},
		{
			name: "status with negative active turns",
			write: func(ctx context.Context) error {
				return admin.Status().Patch(ctx, sessionRef(ns, existing.Name), mergePatch(
					`{"status":{"runtime":{"podUID":"p","state":"Serving","activeTurns":-1}}}`))
			},
			field: []string{"status.runtime.activeTurns"},
		},
		{
			name: "status with an unknown phase",
			write: func(ctx context.Context) error {
				return admin.Status().Patch(ctx, sessionRef(ns, existing.Name), mergePatch(`{"status":{"phase":"Dozing"}}`))
			},
			field: []string{"status.phase", `"Dozing"`},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.write(t.Context())
			if !apierrors.IsInvalid(err) {
				t.Fatalf("got %v (reason %q), want an Invalid error", err, apierrors.ReasonForError(err))
			}
			for _, f := range tc.field {
				if !strings.Contains(err.Error(), f) {
					t.Errorf("error %q does not contain %q", err, f)
				}
			}
		})
	}

	// None of the refused writes changed the existing session.
	got := mustGetSession(t, ns, existing.Name)
	if got.Spec.TemplateRef.Name != "tpl" || got.Status.Drain != nil || got.Status.Runtime != nil || got.Status.Phase != "" {
		t.Errorf("a refused write changed session %s: spec %+v, status %+v", existing.Name, got.Spec, got.Status)
	}

	t.Run("good template is accepted and defaulted", func(t *testing.T) {
		// Typed: the Go client sends updatePolicy: {}.
		typed := newTemplate(ns, "good", "example.com/rt:v1")
		typed.Spec.Runtime.Env = []corev1.EnvVar{{Name: "MODE", Value: "fast"}}
		if err := admin.Create(t.Context(), typed); err != nil {
			t.Fatalf("create good template: %v", err)
		}
		if typed.Spec.UpdatePolicy.Strategy != lullv1.UpdateStrategyDrain {
			t.Errorf("updatePolicy.strategy = %q, want the default %q", typed.Spec.UpdatePolicy.Strategy, lullv1.UpdateStrategyDrain)
		}
		// Untyped, without updatePolicy at all.
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": lullv1.GroupVersion.String(), "kind": "SessionTemplate",
			"metadata": map[string]any{"name": "good-minimal", "namespace": ns},
			"spec":     map[string]any{"runtime": map[string]any{"image": "example.com/rt:v1"}},
		}}
		if err := admin.Create(t.Context(), u); err != nil {
			t.Fatalf("create minimal template: %v", err)
		}
		got := &lullv1.SessionTemplate{}
		if err := admin.Get(t.Context(), client.ObjectKeyFromObject(u), got); err != nil {
			t.Fatal(err)
		}
		if got.Spec.UpdatePolicy.Strategy != lullv1.UpdateStrategyDrain {
			t.Errorf("minimal template: updatePolicy.strategy = %q, want the default %q", got.Spec.UpdatePolicy.Strategy, lullv1.UpdateStrategyDrain)
		}
	})

	t.Run("good session is accepted", func(t *testing.T) {
		s := newSession(ns, "s"+strings.Repeat("a", 51), "good") // 52 characters: the limit
		if err := admin.Create(t.Context(), s); err != nil {
			t.Fatalf("create session with a 52-character name: %v", err)
		}
		// A status write through the subresource with valid values is
		// accepted; changing other spec fields is allowed.
		if err := admin.Status().Patch(t.Context(), sessionRef(ns, s.Name), mergePatch(
			`{"status":{"phase":"Running","runtime":{"podUID":"p","state":"Serving","activeTurns":0}}}`)); err != nil {
			t.Errorf("valid status write: %v", err)
		}
		if err := admin.Patch(t.Context(), sessionRef(ns, s.Name), mergePatch(`{"spec":{"suspend":true}}`)); err != nil {
			t.Errorf("suspend: %v", err)
		}
	})
}

// create returns a write that creates o.
func create(o client.Object) func(ctx context.Context) error {
	return func(ctx context.Context) error { return admin.Create(ctx, o) }
}
