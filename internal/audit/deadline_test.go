package audit

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// A deletion made before the drain request's deadline is too early, even
// when the auditor sees it only after the deadline (watch latency, or a
// watch break during which it was made). The API server stamps when the
// delete was made: deletionTimestamp minus deletionGracePeriodSeconds.
// Judging the deadline on the auditor's own clock lets a deletion five
// seconds early pass.
func TestDeadlineJudgedOnWhenTheDeleteWasMade(t *testing.T) {
	a := newAuditor()
	deadline := t0.Add(time.Minute)
	req := request("p", "update-a", 1)
	req.Deadline = &metav1.Time{Time: deadline}
	s := &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", ResourceVersion: "10"}}
	s.Status.Drain = req
	s.Status.Runtime = report("p", "update-a", lullv1.RuntimeDraining, 1) // a turn in flight
	a.observeSession(s, t0)

	pod := runningPod("p")
	pod.ResourceVersion = "11"
	a.observePod(pod, false, false, t0.Add(time.Second))

	// Deleted 5 s before the deadline with a 30 s grace period; the auditor
	// sees it 2 s after the deadline.
	deleted := pod.DeepCopy()
	deleted.ResourceVersion = "20"
	deleted.DeletionTimestamp = &metav1.Time{Time: deadline.Add(-5 * time.Second).Add(30 * time.Second)}
	deleted.DeletionGracePeriodSeconds = ptr.To[int64](30)
	a.observePod(deleted, false, false, deadline.Add(2*time.Second))

	ds := a.Deletions()
	if len(ds) != 1 {
		t.Fatalf("deletions = %+v", ds)
	}
	if v := DeletionViolation(ds[0]); ds[0].DeadlinePassed || v == "" {
		t.Errorf("a pod deleted 5 s before its drain deadline (seen 2 s after it) is allowed: DeadlinePassed=%v violation=%q", ds[0].DeadlinePassed, v)
	}
}
