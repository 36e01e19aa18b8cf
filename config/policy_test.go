package config

import (
	"io/fs"
	"reflect"
	"strings"
	"testing"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// The runtime-status admission policy names, one by one, the status fields
// a runtime must not change. A status field added to the API without a rule
// here would be writable by every runtime; this test fails until it is
// added.
func TestRuntimeStatusPolicyCoversEveryControllerField(t *testing.T) {
	b, err := fs.ReadFile(Admission, "admission/runtime-status-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	policy := string(b)
	typ := reflect.TypeOf(lullv1.SessionStatus{})
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if name == "runtime" {
			continue
		}
		rule := "object.?status.?" + name + " == oldObject.?status.?" + name
		if !strings.Contains(policy, rule) {
			t.Errorf("status.%s is not protected from runtimes: add %q to %s", name, rule, "admission/runtime-status-policy.yaml")
		}
	}
	if strings.Contains(policy, "object.?status.?runtime ==") {
		t.Error("the policy forbids runtimes to change status.runtime, the one field they own")
	}
}
