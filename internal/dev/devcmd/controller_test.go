package devcmd

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// `lull controller`, which the local control plane runs, logs as
// lull-controller does. controller-runtime keeps the first logger it is
// given: the root's silencing of its log (for the client commands) must
// not come before the controller's own logger.
func TestControllerCommandKeepsItsLog(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w // the controller's logger writes to the stderr it finds
	root := NewRoot()
	root.SetArgs([]string{"controller", "--kubeconfig", filepath.Join(t.TempDir(), "missing")})
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	runErr := root.Execute()
	ctrllog.Log.Info("logged after the controller started")
	os.Stderr = stderr
	w.Close()
	out, _ := io.ReadAll(r)
	if runErr == nil {
		t.Fatal("lull controller with a missing kubeconfig did not fail")
	}
	if !strings.Contains(string(out), "logged after the controller started") {
		t.Errorf("lull controller logged %q; want controller-runtime's log on its logger", out)
	}
}
