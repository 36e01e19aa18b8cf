package session

import (
	"reflect"
	"strings"
	"testing"
	"time"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// controllerStatus mirrors SessionStatus minus status.runtime and
// status.revokedAdmission. A status field added to the API but not here
// would never be written by the session controller; status.runtime here
// would overwrite the runtime's report, and status.revokedAdmission, the
// template controller's, could undo a revoke of a wave place.
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
		case name == "revokedAdmission" && owned[name]:
			t.Error("the session controller's status patch holds status.revokedAdmission, which belongs to the template controller")
		case name != "runtime" && name != "revokedAdmission" && !owned[name]:
			t.Errorf("status.%s is missing from controllerStatus: the controller would never write it", name)
		}
	}
}

// A session's passing state is its own: a Session that takes the name of
// a deleted one (another UID) before the name was reconciled as gone
// starts its settle delay afresh instead of inheriting the deleted one's,
// which would write its passing state at once.
func TestPassingStateIsNotInheritedByANewSessionOfTheName(t *testing.T) {
	var p passingStates
	if got := p.since("ns/alice", "alice-1", "WaitingForWave", t0); !got.Equal(t0) {
		t.Fatalf("since = %v, want %v", got, t0)
	}
	later := t0.Add(time.Minute)
	if got := p.since("ns/alice", "alice-1", "WaitingForWave", later); !got.Equal(t0) {
		t.Errorf("the same session in the same state: since = %v, want %v", got, t0)
	}
	if got := p.since("ns/alice", "alice-2", "WaitingForWave", later); !got.Equal(later) {
		t.Errorf("a new session of the name: since = %v, want %v (now)", got, later)
	}
	p.forget("ns/alice")
	if len(p.states) != 0 {
		t.Errorf("%d passing states held after the session was forgotten", len(p.states))
	}
}
