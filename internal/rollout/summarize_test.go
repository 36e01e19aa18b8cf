package rollout

import (
	"strings"
	"testing"
	"time"

	"lull.dev/lull/internal/render"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

func TestSummarize(t *testing.T) {
	old := metav1.NewTime(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	newer := metav1.NewTime(old.Add(time.Hour))
	tmpl := &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Generation: 3}, Spec: lullv1.SessionTemplateSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: lullv1.RuntimeContainerName, Image: "i:1"}}}}}}
	rev := render.TemplateRevision(tmpl)
	sess := func(upToDate metav1.ConditionStatus, since metav1.Time, draining, suspended bool) lullv1.Session {
		s := lullv1.Session{Spec: lullv1.SessionSpec{Suspend: suspended}, Status: lullv1.SessionStatus{TemplateRevision: rev}}
		if upToDate != "" {
			s.Status.Conditions = []metav1.Condition{{Type: lullv1.ConditionUpToDate, Status: upToDate, LastTransitionTime: since}}
		}
		if draining {
			s.Status.Drain = &lullv1.DrainRequest{RequestID: "update-0123456789abcdef"}
		}
		return s
	}
	// A session whose pod still runs the previous template revision is stale
	// even while its own UpToDate condition has not caught up.
	previous := sess(metav1.ConditionTrue, old, false, false)
	previous.Status.TemplateRevision = "0000000000"

	st := Summarize(tmpl, []lullv1.Session{
		sess(metav1.ConditionTrue, old, false, false),
		sess(metav1.ConditionFalse, newer, true, false),
		sess(metav1.ConditionFalse, old, true, false),
		sess(metav1.ConditionUnknown, old, false, false),
		sess("", old, false, true),
		previous,
	})
	if st.Sessions != 6 || st.Current != 1 || st.Stale != 4 || st.Draining != 2 || st.Suspended != 1 {
		t.Errorf("counts = %+v", st)
	}
	if st.OldestStaleSince == nil || !st.OldestStaleSince.Equal(&old) {
		t.Errorf("OldestStaleSince = %v, want %v", st.OldestStaleSince, old)
	}
	if st.ObservedGeneration != 3 || len(st.Revision) != 10 {
		t.Errorf("generation %d, revision %q", st.ObservedGeneration, st.Revision)
	}
	if c := meta.FindStatusCondition(st.Conditions, lullv1.ConditionRolledOut); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("RolledOut = %+v, want False", c)
	}

	done := Summarize(tmpl, []lullv1.Session{sess(metav1.ConditionTrue, old, false, false), sess("", old, false, true)})
	if c := meta.FindStatusCondition(done.Conditions, lullv1.ConditionRolledOut); c == nil || c.Status != metav1.ConditionTrue || done.OldestStaleSince != nil {
		t.Errorf("all current: RolledOut = %+v, oldest stale %v", c, done.OldestStaleSince)
	}
}

// A session stuck on a pod that will not terminate is named in the
// rollout's condition while the others finish; once nothing else moves,
// the rollout is Blocked.
func TestSummarizeNamesBlockedSessions(t *testing.T) {
	tmpl := &lullv1.SessionTemplate{Spec: lullv1.SessionTemplateSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: lullv1.RuntimeContainerName, Image: "i:1"}}}}}}
	rev := render.TemplateRevision(tmpl)
	sess := func(name string, status metav1.ConditionStatus, reason string) lullv1.Session {
		return lullv1.Session{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: lullv1.SessionStatus{TemplateRevision: rev,
			Conditions: []metav1.Condition{{Type: lullv1.ConditionUpToDate, Status: status, Reason: reason}}}}
	}
	stuck := sess("carol", metav1.ConditionFalse, lullv1.ReasonPodStuckTerminating)
	st := Summarize(tmpl, []lullv1.Session{sess("alice", metav1.ConditionTrue, lullv1.ReasonUpToDate), sess("bob", metav1.ConditionFalse, lullv1.ReasonDraining), stuck})
	c := meta.FindStatusCondition(st.Conditions, lullv1.ConditionRolledOut)
	if c == nil || c.Reason != "RollingOut" || !strings.Contains(c.Message, "carol (PodStuckTerminating)") {
		t.Errorf("RolledOut = %+v, want RollingOut naming carol", c)
	}
	st = Summarize(tmpl, []lullv1.Session{sess("alice", metav1.ConditionTrue, lullv1.ReasonUpToDate), stuck})
	if c := meta.FindStatusCondition(st.Conditions, lullv1.ConditionRolledOut); c == nil || c.Reason != "Blocked" {
		t.Errorf("RolledOut = %+v, want Blocked", c)
	}
}
