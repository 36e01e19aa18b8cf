package template

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

func TestSummarize(t *testing.T) {
	old := metav1.NewTime(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	newer := metav1.NewTime(old.Add(time.Hour))
	session := func(upToDate metav1.ConditionStatus, since metav1.Time, draining, suspended bool) lullv1.Session {
		s := lullv1.Session{Spec: lullv1.SessionSpec{Suspend: suspended}}
		if upToDate != "" {
			s.Status.Conditions = []metav1.Condition{{Type: lullv1.ConditionUpToDate, Status: upToDate, LastTransitionTime: since}}
		}
		if draining {
			s.Status.Drain = &lullv1.DrainRequest{RequestID: "update-0123456789abcdef"}
		}
		return s
	}
	tmpl := &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Generation: 3}, Spec: lullv1.SessionTemplateSpec{Runtime: lullv1.RuntimeSpec{Image: "i:1"}}}

	st := Summarize(tmpl, []lullv1.Session{
		session(metav1.ConditionTrue, old, false, false),
		session(metav1.ConditionFalse, newer, true, false),
		session(metav1.ConditionFalse, old, true, false),
		session(metav1.ConditionUnknown, old, false, false),
		session("", old, false, true),
	})
	if st.Sessions != 5 || st.Current != 1 || st.Stale != 2 || st.Draining != 2 || st.Suspended != 1 {
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

	done := Summarize(tmpl, []lullv1.Session{session(metav1.ConditionTrue, old, false, false), session("", old, false, true)})
	if c := meta.FindStatusCondition(done.Conditions, lullv1.ConditionRolledOut); c == nil || c.Status != metav1.ConditionTrue || done.OldestStaleSince != nil {
		t.Errorf("all current: RolledOut = %+v, oldest stale %v", c, done.OldestStaleSince)
	}
}
