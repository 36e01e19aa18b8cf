package session

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// A files ConfigMap's appearance releases the sessions waiting for it; its
// referenced-at mark, written before each session's StatefulSet write, must
// not wake every session of the template (O(N²) reconciles over a rollout
// of N sessions), nor must its deletion by the sweeper.
func TestFilesConfigMapMarkDoesNotWakeEverySession(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "agent-files-0123456789ab",
		Labels: map[string]string{lullv1.LabelTemplate: "agent", lullv1.LabelFiles: "0123456789ab"}}}
	marked := cm.DeepCopy()
	marked.Annotations = map[string]string{lullv1.AnnotationFilesReferencedAt: "2026-11-30T12:00:00Z"}
	if !filesCreated.Create(event.CreateEvent{Object: cm}) {
		t.Error("a created files ConfigMap does not release the sessions waiting for it")
	}
	if filesCreated.Update(event.UpdateEvent{ObjectOld: cm, ObjectNew: marked}) {
		t.Error("marking the files ConfigMap referenced enqueues every session of its template")
	}
	if filesCreated.Delete(event.DeleteEvent{Object: cm}) {
		t.Error("a swept files ConfigMap enqueues every session of its template")
	}
}
