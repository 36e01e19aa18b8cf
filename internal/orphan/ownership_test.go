package orphan

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// at sets o's creationTimestamp.
func at[T client.Object](o T, when time.Time) T {
	o.SetCreationTimestamp(metav1.NewTime(when))
	return o
}

// TestJudgeKeepsALiveSessionsPodCreatedInItsFirstSecond: creation
// timestamps have a resolution of one second (metav1.Time is serialized
// without fractions), and a session's first pod is routinely created
// within the second its Session was (lull creates the StatefulSet on the
// first reconcile). A live session's pod whose owner reference was
// stripped before the status names it must not be judged a predecessor's:
// deleting it kills its runtime without a drain. What tells it from a
// predecessor's pod of the same second (a script deleting the Session
// with --cascade=orphan and creating it again at once): the session has
// its own StatefulSet, which a recreated session gets only once its
// predecessor's pods are gone.
func TestJudgeKeepsALiveSessionsPodCreatedInItsFirstSecond(t *testing.T) {
	own := at(sts("sts", bySession("cur"), "cur"), created)
	got := verdicts(Judge(Observed{Session: sess("cur"), Objects: []client.Object{own, at(pod("pod-new", nil), created)}}))
	if len(got) != 0 {
		t.Errorf("Judge = %v for the session's own pod created in the Session's second; want nothing (it is the session's own)", got)
	}
	// Without a StatefulSet of the session's, a pod of that second is a
	// predecessor's: a StatefulSet created now would adopt it.
	got = verdicts(Judge(Observed{Session: sess("cur"), Objects: []client.Object{at(pod("pod-old", nil), created)}}))
	if want := []string{"Pod/x-0=Reap()"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Judge (no StatefulSet of the session's) = %v, want %v", got, want)
	}
}

// TestJudgeNeverReapsALiveSessionsUnlabelledStatefulSet: objects made by a
// lull that predates lull.dev/session-uid carry no such label. A live
// session whose StatefulSet lost its owner reference (before the upgrade
// lull only reported NameConflict, and the pod kept running) must not
// have it reaped after the upgrade: that deletes its pod, busy or not,
// without a drain. A StatefulSet created after the Session is that
// session's (a predecessor's was created before it): its owner is
// restored, and its pod kept.
func TestJudgeNeverReapsALiveSessionsUnlabelledStatefulSet(t *testing.T) {
	after := created.Add(time.Minute)
	got := verdicts(Judge(Observed{Session: sess("cur"), Objects: []client.Object{
		at(sts("sts", nil, ""), after),
		at(pod("p", bySTS("sts")), after),
		at(&corev1.ServiceAccount{ObjectMeta: meta("lull-runtime-x", "sa", nil, "")}, after),
	}}))
	want := []string{"ServiceAccount/lull-runtime-x=RestoreOwner()", "StatefulSet/x=RestoreOwner()"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Judge:\n got %v\nwant %v", got, want)
	}
	// The same objects from before the Session are a predecessor's.
	before := created.Add(-time.Minute)
	got = verdicts(Judge(Observed{Session: sess("cur"), Objects: []client.Object{
		at(sts("sts", nil, ""), before),
		at(pod("p", bySTS("sts")), before),
	}}))
	want = []string{"Pod/x-0=Reap()", "StatefulSet/x=Reap()"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Judge (objects older than the Session):\n got %v\nwant %v", got, want)
	}
}

// TestJudgeLeavesObjectsLullDoesNotNameAlone: lull names a session's
// objects (lull-runtime-<name> for its identity, <name> for its Service
// and StatefulSet, <name>-<ordinal> for its pods). A user's own object
// that carries lull.dev/session=<name> (an extra Service whose labels are
// copied from its selector, a debug pod copied from the session's pod) is
// not one lull made: it is never reaped, whether its session is alive,
// recreated or gone.
func TestJudgeLeavesObjectsLullDoesNotNameAlone(t *testing.T) {
	before := created.Add(-time.Minute)
	users := []client.Object{
		at(&corev1.Service{ObjectMeta: meta("x-public", "svc", nil, "")}, before),
		at(&rbacv1.Role{ObjectMeta: meta("x-readers", "r", nil, "")}, before),
		at(&corev1.Pod{ObjectMeta: meta("x-debug", "dbg", nil, "")}, before),
	}
	for _, s := range []struct {
		name string
		obs  Observed
	}{{"live", Observed{Session: sess("cur"), Objects: users}}, {"gone", Observed{Objects: users}}} {
		if got := verdicts(Judge(s.obs)); len(got) != 0 {
			t.Errorf("session %s: Judge = %v; want nothing: lull made none of these", s.name, got)
		}
	}
}
