package template

import (
	"encoding/json"
	"testing"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// The status is written as a JSON merge patch, which keeps every key it
// does not mention: every field that is empty now must be in the patch as
// null, or a count back at 0, a lifted pause or a withdrawn completion
// time would never reach the API server.
func TestStatusPatchClearsEveryEmptyField(t *testing.T) {
	body, err := statusPatch(lullv1.SessionTemplateStatus{Revision: "r2"}, "7")
	if err != nil {
		t.Fatal(err)
	}
	var patch struct {
		Status map[string]any `json:"status"`
	}
	if err := json.Unmarshal(body, &patch); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"withoutDeadline", "pausedRevision", "failing", "expectedCompletion", "wave", "oldestStaleSince", "conditions"} {
		v, ok := patch.Status[name]
		if !ok || v != nil {
			t.Errorf("status.%s in the patch: %v (present %v), want null", name, v, ok)
		}
	}
	if patch.Status["revision"] != "r2" {
		t.Errorf("revision = %v", patch.Status["revision"])
	}
}
