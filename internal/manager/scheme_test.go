package manager_test

import (
	"testing"

	"lull.dev/lull/internal/dev/testenv"
	"lull.dev/lull/internal/manager"
)

// TestSchemeIsTheManagers: the controllers' tests build their fake clients
// on testenv.Scheme (they cannot import this package, which imports
// them); it must know exactly the types the manager's scheme does, or a
// test would pass against objects the controller cannot decode.
func TestSchemeIsTheManagers(t *testing.T) {
	want, got := manager.Scheme().AllKnownTypes(), testenv.Scheme().AllKnownTypes()
	for gvk := range want {
		if _, ok := got[gvk]; !ok {
			t.Errorf("testenv.Scheme lacks %s", gvk)
		}
	}
	for gvk := range got {
		if _, ok := want[gvk]; !ok {
			t.Errorf("testenv.Scheme has %s, which manager.Scheme lacks", gvk)
		}
	}
	if len(want) < 100 {
		t.Fatalf("manager.Scheme knows only %d types: the comparison proves nothing", len(want))
	}
}
