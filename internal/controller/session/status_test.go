package session

import (
	"reflect"
	"strings"
	"testing"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// controllerStatus mirrors SessionStatus minus status.runtime. A status
// field added to the API but not here would never be written by the
// controller; status.runtime here would overwrite the runtime's report.
func TestControllerStatusCoversEveryControllerField(t *testing.T) {
	owned := map[string]bool{}
	ct := reflect.TypeOf(controllerStatus{})
	for i := range ct.NumField() {
		owned[strings.Split(ct.Field(i).Tag.Get("json"), ",")[0]] = true
	}
	st := reflect.TypeOf(lullv1.SessionStatus{})
	for i := range st.NumField() {
		name := strings.Split(st.Field(i).Tag.Get("json"), ",")[0]
		switch {
		case name == "runtime" && owned[name]:
			t.Error("the controller's status patch holds status.runtime, which belongs to the runtime")
		case name != "runtime" && !owned[name]:
			t.Errorf("status.%s is missing from controllerStatus: the controller would never write it", name)
		}
	}
}
