package config

import (
	"bytes"
	"io"
	"io/fs"
	"reflect"
	"regexp"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/util/yaml"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

const policyFile = "admission/runtime-status-policy.yaml"

// The rule that keeps a runtime off the controller's status fields: every
// key of status but the runtime's report is unchanged, in both directions.
// It names no field, so it cannot go stale when the API gains one.
var (
	controllerFieldsRule = regexp.MustCompile(
		`^variables\.newStatus\.all\(k, k == '(\w+)' \|\| \(k in variables\.oldStatus && variables\.newStatus\[k\] == variables\.oldStatus\[k\]\)\) &&\s+` +
			`variables\.oldStatus\.all\(k, k == '(\w+)' \|\| k in variables\.newStatus\)$`)
	// The report's podUID against the pod the caller's token is bound to.
	podUIDRule = regexp.MustCompile(
		`^!has\(variables\.newStatus\.(\w+)\) \|\|\s+variables\.newStatus\.(\w+)\.\?(\w+)\.orValue\(''\) == variables\.callerPodUID$`)
)

// The extra info the API server gives a pod-bound ServiceAccount token.
const podUIDExtra = "authentication.kubernetes.io/pod-uid"

func loadRuntimeStatusPolicy(t *testing.T) *admissionregistrationv1.ValidatingAdmissionPolicy {
	t.Helper()
	b, err := fs.ReadFile(Admission, policyFile)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", policyFile, err)
		}
		if p.Kind == "ValidatingAdmissionPolicy" {
			return &p
		}
	}
	t.Fatalf("%s holds no ValidatingAdmissionPolicy", policyFile)
	return nil
}

// jsonName is the JSON name of the field of typ whose Go name is field.
func jsonName(t *testing.T, typ reflect.Type, field string) string {
	t.Helper()
	f, ok := typ.FieldByName(field)
	if !ok {
		t.Fatalf("%s has no field %s", typ, field)
	}
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
}

// A status field added to the API must be the controller's from the start:
// the policy protects every status key but the runtime's report, without
// listing them, and exempts exactly the field the API calls the runtime's.
func TestRuntimeStatusPolicyProtectsEveryControllerField(t *testing.T) {
	p := loadRuntimeStatusPolicy(t)
	statusType := reflect.TypeFor[lullv1.SessionStatus]()
	runtimeField := jsonName(t, statusType, "Runtime")

	var rule string
	for _, v := range p.Spec.Validations {
		if controllerFieldsRule.MatchString(v.Expression) {
			if rule != "" {
				t.Errorf("two validations protect the controller's fields")
			}
			rule = v.Expression
		}
	}
	if rule == "" {
		t.Fatalf("no validation of %s has the shape %s: the controller's status fields are not protected from runtimes", policyFile, controllerFieldsRule)
	}
	m := controllerFieldsRule.FindStringSubmatch(rule)
	if m[1] != runtimeField || m[2] != runtimeField {
		t.Errorf("the rule exempts status keys %q and %q, want only %q, the JSON name of SessionStatus.Runtime", m[1], m[2], runtimeField)
	}

	// No field list: a list would go stale as soon as the API gains a field.
	for i := range statusType.NumField() {
		name, _, _ := strings.Cut(statusType.Field(i).Tag.Get("json"), ",")
		if name == runtimeField {
			continue
		}
		for _, v := range p.Spec.Validations {
			if regexp.MustCompile(`(?i)status\.\??` + regexp.QuoteMeta(name) + `\b`).MatchString(v.Expression) {
				t.Errorf("validation %q names status.%s: protect controller fields by the all-keys rule, not one by one", v.Expression, name)
			}
		}
	}
}

// The report's podUID is bound to the pod of the caller's token, and a
// token bound to no pod is refused.
func TestRuntimeStatusPolicyBindsReportToCallerPod(t *testing.T) {
	p := loadRuntimeStatusPolicy(t)
	runtimeField := jsonName(t, reflect.TypeFor[lullv1.SessionStatus](), "Runtime")
	podUIDField := jsonName(t, reflect.TypeFor[lullv1.RuntimeReport](), "PodUID")

	var caller string
	for _, v := range p.Spec.Variables {
		if v.Name == "callerPodUID" {
			caller = v.Expression
		}
	}
	if !strings.Contains(caller, "request.userInfo.extra['"+podUIDExtra+"']") {
		t.Errorf("variable callerPodUID = %q, want it read from the user's extra info %q", caller, podUIDExtra)
	}

	var bound, matches bool
	for _, v := range p.Spec.Validations {
		if v.Expression == "variables.callerPodUID != ''" {
			bound = true
		}
		if m := podUIDRule.FindStringSubmatch(v.Expression); m != nil {
			matches = true
			if m[1] != runtimeField || m[2] != runtimeField || m[3] != podUIDField {
				t.Errorf("validation %q checks status.%s.%s, want status.%s.%s", v.Expression, m[2], m[3], runtimeField, podUIDField)
			}
		}
	}
	if !bound {
		t.Error("no validation refuses a runtime token bound to no pod (variables.callerPodUID != '')")
	}
	if !matches {
		t.Errorf("no validation has the shape %s: status.runtime.podUID is not bound to the caller's pod", podUIDRule)
	}
}
