package cli

import (
	"context"
	"strings"
	"testing"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// lull resume says what happens, and only that. An idle cull suspended the
// session (lull.dev/idle-suspended names its request) and the user resumed
// it before its drained pod was scaled away: the controller replaces that
// pod and the session keeps running; it will never show Suspended. A second
// lull resume must not say the session is being suspended and ask to
// resume it again once it shows Suspended.
func TestResumeOfAResumedIdleCullSaysThePodIsReplaced(t *testing.T) {
	s := testSession(func(s *lullv1.Session) {
		idleRequest(s)
		s.Status.Replacement = &lullv1.Replacement{PodUID: "pod-1", Reason: lullv1.ReplacementDrained, RequestID: idleID}
		s.Annotations[lullv1.AnnotationIdleSuspended] = idleID
	})
	c, patches := sessionClient(t, s)
	msg, err := resumeSession(context.Background(), c, "ns", "s1")
	if err != nil || strings.Contains(msg, "suspended") && !strings.Contains(msg, "resumed") {
		t.Fatalf("resume = %q, %v; want it to say the session is resumed and its drained pod replaced", msg, err)
	}
	if !strings.Contains(msg, "replaced") {
		t.Errorf("resume = %q; want it to say the drained pod is being replaced", msg)
	}
	if len(*patches) != 0 {
		t.Errorf("patches %q, want none", *patches)
	}
}
