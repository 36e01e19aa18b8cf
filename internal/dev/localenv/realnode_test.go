package localenv

import (
	"os/exec"
	"strings"
	"testing"

	"lull.dev/lull/internal/dev/devcluster"
)

// go missing from PATH, as after a plain sudo, is named with the command
// that keeps it; any other failure to find lull's source says to run
// inside the repository.
func TestModuleRootErrorNamesTheFix(t *testing.T) {
	noGo := moduleRootError(&exec.Error{Name: "go", Err: exec.ErrNotFound})
	for _, want := range []string{"not on PATH", "sudo resets PATH", devcluster.RealNodeAsRoot} {
		if !strings.Contains(noGo.Error(), want) {
			t.Errorf("go not found: %q does not name %q", noGo, want)
		}
	}
	outside := moduleRootError(nil)
	if !strings.Contains(outside.Error(), "inside the lull repository") {
		t.Errorf("outside the repository: %q", outside)
	}
}
