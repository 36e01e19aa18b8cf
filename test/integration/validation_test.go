package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// workspaceClaim is a claim template of the given name and size.
func workspaceClaim(name, size string) corev1.PersistentVolumeClaim {
	return corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		},
	}
}

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

	tpl := func(name string, edit func(t *lullv1.SessionTemplate)) *lullv1.SessionTemplate {
		t := newTemplate(ns, name, "example.com/rt:v1")
		edit(t)
		return t
	}
	podSpec := func(t *lullv1.SessionTemplate) *corev1.PodSpec { return &t.Spec.Template.Spec }
	sidecar := corev1.Container{Name: "proxy", Image: "example.com/proxy:v1"}

	// An existing template, for the update cases.
	withClaim := tpl("with-claim", func(t *lullv1.SessionTemplate) {
		t.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{workspaceClaim("workspace", "1Gi")}
	})
	if err := admin.Create(ctx, withClaim); err != nil {
		t.Fatalf("create template: %v", err)
	}

	cases := []struct {
		name string
		// write makes the refused request.
		write func(ctx context.Context) error
		// field is the path the message must name; also holds the rule's
		// message where there is one.
		field []string
	}{
		{
			name:  "template with empty runtime image",
			write: create(newTemplate(ns, "empty-image", "")),
			field: []string{"spec.template.spec.containers[runtime].image", "needs an image"},
		},
		{
			name:  "template without a runtime container",
			write: create(tpl("no-runtime", func(t *lullv1.SessionTemplate) { podSpec(t).Containers[0].Name = "main" })),
			field: []string{"spec.template.spec.containers", "exactly one container must be named runtime"},
		},
		{
			name: "template with two runtime containers",
			write: create(tpl("two-runtimes", func(t *lullv1.SessionTemplate) {
				podSpec(t).Containers = append(podSpec(t).Containers, podSpec(t).Containers[0])
			})),
			field: []string{"spec.template.spec.containers"},
		},
		{
			name:  "template with a serviceAccountName",
			write: create(tpl("own-sa", func(t *lullv1.SessionTemplate) { podSpec(t).ServiceAccountName = "mine" })),
			field: []string{"spec.template.spec.serviceAccountName", "remove the field"},
		},
		{
			name:  "template that sets automountServiceAccountToken",
			write: create(tpl("automount", func(t *lullv1.SessionTemplate) { podSpec(t).AutomountServiceAccountToken = ptr.To(false) })),
			field: []string{"spec.template.spec.automountServiceAccountToken", "remove the field"},
		},
		{
			name:  "template with restartPolicy OnFailure",
			write: create(tpl("restart", func(t *lullv1.SessionTemplate) { podSpec(t).RestartPolicy = corev1.RestartPolicyOnFailure })),
			field: []string{"spec.template.spec.restartPolicy", "Always"},
		},
		{
			name: "template with one of lull's labels",
			write: create(tpl("lull-label", func(t *lullv1.SessionTemplate) {
				t.Spec.Template.Labels = map[string]string{"app": "agent", lullv1.LabelSession: "x"}
			})),
			field: []string{"spec.template.metadata.labels", "lull.dev/"},
		},
		{
			name: "template with a sidecar named like lull's agent",
			write: create(tpl("agent-name", func(t *lullv1.SessionTemplate) {
				c := sidecar
				c.Name = lullv1.AgentContainerName
				podSpec(t).Containers = append(podSpec(t).Containers, c)
			})),
			field: []string{"spec.template.spec", "lull-agent is reserved"},
		},
		{
			name: "template with a volume named with lull's prefix",
			write: create(tpl("lull-volume", func(t *lullv1.SessionTemplate) {
				podSpec(t).Volumes = []corev1.Volume{{Name: "lull-cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
			})),
			field: []string{"spec.template.spec.volumes", "reserved"},
		},
		{
			name: "claim template without a name",
			write: create(tpl("nameless-claim", func(t *lullv1.SessionTemplate) {
				t.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{workspaceClaim("", "1Gi")}
			})),
			field: []string{"spec.volumeClaimTemplates", "needs metadata.name"},
		},
		{
			name: "changing the claim templates of a template",
			write: func(ctx context.Context) error {
				changed := withClaim.DeepCopy()
				changed.Spec.VolumeClaimTemplates[0] = workspaceClaim("workspace", "2Gi")
				return admin.Update(ctx, changed)
			},
			field: []string{"spec.volumeClaimTemplates cannot be changed"},
		},
		{
			name: "adding claim templates to a template",
			write: func(ctx context.Context) error {
				cur := &lullv1.SessionTemplate{}
				if err := admin.Get(ctx, client.ObjectKeyFromObject(withClaim), cur); err != nil {
					return err
				}
				cur.Spec.VolumeClaimTemplates = append(cur.Spec.VolumeClaimTemplates, workspaceClaim("cache", "1Gi"))
				return admin.Update(ctx, cur)
			},
			field: []string{"spec.volumeClaimTemplates cannot be changed"},
		},
		{
			name:  "template name longer than 63 characters",
			write: create(newTemplate(ns, strings.Repeat("t", 64), "example.com/rt:v1")),
			field: []string{"metadata.name", "at most 63 characters"},
		},
		{
			name:  "template with an unknown update strategy",
			write: create(tpl("bad-strategy", func(t *lullv1.SessionTemplate) { t.Spec.UpdatePolicy.Strategy = "Sometimes" })),
			field: []string{"spec.updatePolicy.strategy", `"Sometimes"`},
		},
		{
			name:  "template with a negative drainTimeout",
			write: createRaw(ns, "negative-timeout", `{"drainTimeout":"-5m"}`),
			field: []string{"spec.updatePolicy.drainTimeout", "at least 1s"},
		},
		{
			name:  "template with a malformed drainTimeout",
			write: createRaw(ns, "malformed-timeout", `{"drainTimeout":"soon"}`),
			field: []string{"spec.updatePolicy.drainTimeout"},
		},
		{
			name:  "template with an unknown onDrainTimeout",
			write: createRaw(ns, "bad-on-timeout", `{"drainTimeout":"5m","onDrainTimeout":"Later"}`),
			field: []string{"spec.updatePolicy.onDrainTimeout", `"Later"`},
		},
		{
			name:  "template with an unknown node drain strategy",
			write: createRawSpec(ns, "bad-node-strategy", `"nodeDrainPolicy":{"strategy":"Sometimes"}`),
			field: []string{"spec.nodeDrainPolicy.strategy", `"Sometimes"`},
		},
		{
			name:  "template with a negative node drainTimeout",
			write: createRawSpec(ns, "negative-node-timeout", `"nodeDrainPolicy":{"drainTimeout":"-5m"}`),
			field: []string{"spec.nodeDrainPolicy.drainTimeout", "at least 1s"},
		},
		{
			name:  "template with a malformed node drainTimeout",
			write: createRawSpec(ns, "malformed-node-timeout", `"nodeDrainPolicy":{"drainTimeout":"soon"}`),
			field: []string{"spec.nodeDrainPolicy.drainTimeout"},
		},
		{
			name:  "template with an unknown node onDrainTimeout",
			write: createRawSpec(ns, "bad-node-on-timeout", `"nodeDrainPolicy":{"onDrainTimeout":"Later"}`),
			field: []string{"spec.nodeDrainPolicy.onDrainTimeout", `"Later"`},
		},
		{
			name:  "template with an unknown node drain wave",
			write: createRawSpec(ns, "bad-node-wave", `"nodeDrainPolicy":{"wave":"Cluster"}`),
			field: []string{"spec.nodeDrainPolicy.wave", `"Cluster"`},
		},
		{
			name:  "maxUnavailable 0 with Replace",
			write: createRaw(ns, "zero-replace", `{"strategy":"Replace","maxUnavailable":0}`),
			field: []string{"spec.updatePolicy", "maxUnavailable: 0 would let no session move"},
		},
		{
			name:  "maxUnavailable 0% with Drain",
			write: createRaw(ns, "zero-drain", `{"strategy":"Drain","maxUnavailable":"0%"}`),
			field: []string{"spec.updatePolicy", "maxUnavailable: 0 would let no session move"},
		},
		{
			name:  "maxUnavailable over 100%",
			write: createRaw(ns, "over-100", `{"maxUnavailable":"150%"}`),
			field: []string{"spec.updatePolicy.maxUnavailable", "from 0% to 100%"},
		},
		{
			name:  "maxUnavailable negative",
			write: createRaw(ns, "negative-max", `{"maxUnavailable":-1}`),
			field: []string{"spec.updatePolicy.maxUnavailable"},
		},
		{
			name:  "failureThreshold 0",
			write: createRaw(ns, "zero-threshold", `{"failureThreshold":0}`),
			field: []string{"spec.updatePolicy.failureThreshold", "1 or more"},
		},
		{
			name:  "progressDeadlineSeconds 0",
			write: createRaw(ns, "zero-deadline", `{"progressDeadlineSeconds":0}`),
			field: []string{"spec.updatePolicy.progressDeadlineSeconds"},
		},
		{
			name:  "break-glass without a reason",
			write: createRawSpec(ns, "bg-no-reason", `"breakGlass":{"revision":"abc"}`),
			field: []string{"spec.breakGlass.reason"},
		},
		{
			name:  "break-glass with a negative grace",
			write: createRawSpec(ns, "bg-negative", `"breakGlass":{"revision":"abc","reason":"CVE","grace":"-1m"}`),
			field: []string{"spec.breakGlass.grace", "must not be negative"},
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
			name:  "template with a negative idle.suspendAfter",
			write: createRawSpec(ns, "negative-idle", `"idle":{"suspendAfter":"-1m"}`),
			field: []string{"spec.idle.suspendAfter", "must not be negative"},
		},
		{
			name:  "template with a malformed idle.deleteAfter",
			write: createRawSpec(ns, "malformed-idle", `"idle":{"deleteAfter":"after lunch"}`),
			field: []string{"spec.idle.deleteAfter", "must be a duration such as 90s, 30m or 24h"},
		},
		{
			name:  "template whose idle.deleteAfter is shorter than suspendAfter",
			write: createRawSpec(ns, "delete-before-suspend", `"idle":{"suspendAfter":"1h","deleteAfter":"30m"}`),
			field: []string{"spec.idle", "deleteAfter must not be shorter than idle.suspendAfter"},
		},
		{
			name:  "template with a maxLifetime under a minute",
			write: createRawSpec(ns, "short-lifetime", `"maxLifetime":"30s"`),
			field: []string{"spec.maxLifetime", "at least 1m"},
		},
		{
			name:  "template with a negative maxLifetime",
			write: createRawSpec(ns, "negative-lifetime", `"maxLifetime":"-2h"`),
			field: []string{"spec.maxLifetime"},
		},
		{
			name:  "template with a maxLifetime in days",
			write: createRawSpec(ns, "days-lifetime", `"maxLifetime":"1d"`),
			field: []string{"spec.maxLifetime", "no d"},
		},
		{
			name: "session whose idle.deleteAfter is shorter than suspendAfter",
			write: func(ctx context.Context) error {
				return admin.Patch(ctx, sessionRef(ns, existing.Name), mergePatch(`{"spec":{"idle":{"suspendAfter":"2h","deleteAfter":"1h"}}}`))
			},
			field: []string{"spec.idle", "deleteAfter must not be shorter"},
		},
		{
			name: "status with a refresh interval over an hour",
			write: func(ctx context.Context) error {
				return admin.Status().Patch(ctx, sessionRef(ns, existing.Name), mergePatch(
					`{"status":{"runtime":{"podUID":"p","state":"Serving","activeTurns":0,"refreshSeconds":7200}}}`))
			},
			field: []string{"status.runtime.refreshSeconds"},
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
		typed.RuntimeContainer().Env = []corev1.EnvVar{{Name: "MODE", Value: "fast"}}
		typed.Spec.Agent = &lullv1.AgentSpec{}
		if err := admin.Create(t.Context(), typed); err != nil {
			t.Fatalf("create good template: %v", err)
		}
		if typed.Spec.UpdatePolicy.Strategy != lullv1.UpdateStrategyDrain {
			t.Errorf("updatePolicy.strategy = %q, want the default %q", typed.Spec.UpdatePolicy.Strategy, lullv1.UpdateStrategyDrain)
		}
		if typed.Spec.Agent.Image != lullv1.DefaultAgentImage {
			t.Errorf("agent.image = %q, want the default %q", typed.Spec.Agent.Image, lullv1.DefaultAgentImage)
		}
		if p := typed.Spec.PersistentVolumeClaimRetentionPolicy; p == nil || p.WhenDeleted != "Delete" || p.WhenScaled != "Retain" {
			t.Errorf("persistentVolumeClaimRetentionPolicy = %+v, want the default whenDeleted Delete, whenScaled Retain", p)
		}
		// Untyped, without updatePolicy at all.
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": lullv1.GroupVersion.String(), "kind": "SessionTemplate",
			"metadata": map[string]any{"name": "good-minimal", "namespace": ns},
			"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
				"containers": []any{map[string]any{"name": "runtime", "image": "example.com/rt:v1"}},
			}}},
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
		if got.Spec.Idle != nil || got.Spec.MaxLifetime != nil {
			t.Errorf("minimal template: idle %+v, maxLifetime %v; want none injected (never culled)", got.Spec.Idle, got.Spec.MaxLifetime)
		}
		if p := got.Spec.NodeDrainPolicy; p.Strategy != lullv1.NodeDrainStrategyDrain || p.DrainTimeout == nil || p.DrainTimeout.Duration != lullv1.DefaultNodeDrainTimeout ||
			p.OnDrainTimeout != lullv1.DrainTimeoutReplace || p.Wave != lullv1.NodeDrainWaveNode {
			t.Errorf("minimal template: nodeDrainPolicy %+v; want the defaults Drain, 10m, Replace, Node", p)
		}
	})

	t.Run("lifecycle limits of zero mean never and are accepted", func(t *testing.T) {
		if err := createRawSpec(ns, "zero-lifecycle", `"idle":{"suspendAfter":"0s","deleteAfter":"0s"},"maxLifetime":"0s"`)(t.Context()); err != nil {
			t.Fatalf("zero limits: %v", err)
		}
		if err := createRawSpec(ns, "delete-only", `"idle":{"deleteAfter":"30m"},"maxLifetime":"24h"`)(t.Context()); err != nil {
			t.Fatalf("deleteAfter without suspendAfter: %v", err)
		}
		if err := createRawSpec(ns, "suspend-then-delete", `"idle":{"suspendAfter":"30m","deleteAfter":"30m"}`)(t.Context()); err != nil {
			t.Fatalf("deleteAfter equal to suspendAfter: %v", err)
		}
	})

	t.Run("example templates are accepted", func(t *testing.T) {
		paths, err := filepath.Glob("../../examples/templates/*.yaml")
		if err != nil || len(paths) == 0 {
			t.Fatalf("no example templates (%v)", err)
		}
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(b, &u.Object); err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			u.SetNamespace(ns)
			if err := admin.Create(t.Context(), u); err != nil {
				t.Errorf("%s refused: %v", p, err)
			}
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

// createRaw returns a write that creates a template with the given
// updatePolicy, as JSON: durations a typed client could not send.
func createRaw(ns, name, updatePolicy string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		u := &unstructured.Unstructured{}
		err := json.Unmarshal([]byte(`{"apiVersion":"lull.dev/v1alpha1","kind":"SessionTemplate","metadata":{"name":"`+name+`","namespace":"`+ns+`"},
			"spec":{"template":{"spec":{"containers":[{"name":"runtime","image":"example.com/rt:v1"}]}},"updatePolicy":`+updatePolicy+`}}`), &u.Object)
		if err != nil {
			return err
		}
		return admin.Create(ctx, u)
	}
}

// createRawSpec returns a write that creates a template with extra spec
// fields, as JSON.
func createRawSpec(ns, name, fields string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		u := &unstructured.Unstructured{}
		err := json.Unmarshal([]byte(`{"apiVersion":"lull.dev/v1alpha1","kind":"SessionTemplate","metadata":{"name":"`+name+`","namespace":"`+ns+`"},
			"spec":{"template":{"spec":{"containers":[{"name":"runtime","image":"example.com/rt:v1"}]}},`+fields+`}}`), &u.Object)
		if err != nil {
			return err
		}
		return admin.Create(ctx, u)
	}
}

// create returns a write that creates o.
func create(o client.Object) func(ctx context.Context) error {
	return func(ctx context.Context) error { return admin.Create(ctx, o) }
}
