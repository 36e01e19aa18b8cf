package session

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// The cached Session keeps the entries ReportWrittenAt and
// forceUpdateManager read, and nothing else of its managed fields or
// kubectl's last-applied annotation; what the controller reads from it is
// unchanged.
func TestStripSessionForCache(t *testing.T) {
	at := func(sec int) *metav1.Time {
		v := metav1.NewTime(time.Date(2026, 11, 30, 12, 0, sec, 0, time.UTC))
		return &v
	}
	entry := func(manager, fields string, when *metav1.Time) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Time: when, FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
	}
	s := &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Name: "s",
		Annotations: map[string]string{corev1.LastAppliedConfigAnnotation: "{}", lullv1.AnnotationForceUpdate: "true", "keep": "me"},
		ManagedFields: []metav1.ManagedFieldsEntry{
			entry("kubectl-client-side-apply", `{"f:metadata":{"f:annotations":{"f:kubectl.kubernetes.io/last-applied-configuration":{}}},"f:spec":{"f:templateRef":{}}}`, at(1)),
			entry("lull-controller", `{"f:status":{"f:conditions":{},"f:phase":{}}}`, at(5)),
			entry("lull-runtime", `{"f:status":{"f:runtime":{"f:state":{}}}}`, at(3)),
			entry("alice", `{"f:metadata":{"f:annotations":{"f:`+lullv1.AnnotationForceUpdate+`":{}}}}`, at(2)),
			{Manager: "no-fields"},
		}}}
	wantWritten, wantForced := ReportWrittenAt(s), forceUpdateManager(s)

	out, err := StripSessionForCache(s.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*lullv1.Session)
	var managers []string
	for _, mf := range got.ManagedFields {
		managers = append(managers, mf.Manager)
	}
	if len(managers) != 2 || managers[0] != "lull-runtime" || managers[1] != "alice" {
		t.Errorf("kept entries of %v, want lull-runtime's and alice's", managers)
	}
	if w := ReportWrittenAt(got); !w.Equal(wantWritten) || w.IsZero() {
		t.Errorf("ReportWrittenAt = %v, want %v", w, wantWritten)
	}
	if f := forceUpdateManager(got); f != wantForced {
		t.Errorf("forceUpdateManager = %q, want %q", f, wantForced)
	}
	if _, ok := got.Annotations[corev1.LastAppliedConfigAnnotation]; ok || got.Annotations["keep"] != "me" || got.Annotations[lullv1.AnnotationForceUpdate] != "true" {
		t.Errorf("annotations = %v, want all but %s", got.Annotations, corev1.LastAppliedConfigAnnotation)
	}

	bare := &lullv1.Session{}
	if out, err := StripSessionForCache(bare); err != nil || out.(*lullv1.Session).ManagedFields != nil {
		t.Errorf("a session without managed fields: %v, %v", out, err)
	}
	if out, err := StripSessionForCache("tombstone"); err != nil || out != "tombstone" {
		t.Errorf("not a session: %v, %v; want it passed through", out, err)
	}
}
