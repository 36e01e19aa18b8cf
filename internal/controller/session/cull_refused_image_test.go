package session

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/drain"
)

// Rule 9 (withholdOnRefusedImage) lets an idle cull go on while the
// catalog refuses the StatefulSet's image, as a cull scales the pod away
// and starts none. Once it is committed (reason Drained, for the Idle
// request), a cull that is no longer due (the template's idle policy
// removed, lull.dev/keep-alive, or a resume after the cull's own
// suspension) is not finished as a cull but, as a commitment never lapses,
// as a replacement (finishCommitted): by deleting the pod, after which the
// StatefulSet, at one replica, creates the successor from the template it
// holds, the image the catalog refuses. No step was ever judged as a
// replacement onto that image, so while it is refused the committed
// replacement is held instead: the pod is not deleted, its runtime stays
// sealed.
//
// Here alice's current pod runs example.com/agent:2, its idle cull is
// committed, and the catalog lists only agent:3. The operator turns the
// template's idle culling off. (Found by the fifth review, which
// committed this test failing.)
func TestACommittedIdleCullThatIsNoLongerDueDoesNotReplaceThePodOntoARefusedImage(t *testing.T) {
	w := committedIdleWorld(t, interceptor.Funcs{})
	createCatalog(t, w, "3")
	setIdlePolicy(t, w, lullv1.IdlePolicy{}) // idle culling off: the cull is no longer due

	for range 2 {
		_, _ = w.reconcile()
	}

	sts := w.statefulSet()
	if replicas := ptr.Deref(sts.Spec.Replicas, 1); len(w.deletes) > 0 && replicas > 0 {
		t.Errorf("pod alice-0 deleted (%d deletes) with StatefulSet alice at %d replica(s) holding %s, which the catalog refuses: the StatefulSet controller creates its successor on it",
			len(w.deletes), replicas, runtimeImage(sts))
	}
}

// Rule 9 exempts the idle cull by what the step commits, not by the drain
// request it runs under: while an Idle drain is outstanding for a stale
// pod, a force-update commits a replacement like any other, whose delete
// has the StatefulSet create the successor on the image the catalog
// refuses. It is withheld: nothing is committed and the pod is not
// deleted. (Found by the sixth review.)
func TestNoReplacementUnderAnIdleDrainIsDeletedOntoARefusedImage(t *testing.T) {
	w := newWorld(t, interceptor.Funcs{}, func(s *lullv1.Session, pod *corev1.Pod) {
		pod.Labels[appsv1.ControllerRevisionHashLabelKey] = "alice-old" // stale
		pod.CreationTimestamp = metav1.NewTime(t0.Add(-2 * time.Hour))
		last := metav1.NewTime(t0.Add(-time.Hour))
		id := drain.RequestID(pod.UID, lullv1.DrainReasonIdle, 1)
		s.Annotations = map[string]string{lullv1.AnnotationForceUpdate: "true"}
		s.Status.DrainSequence = 1
		s.Status.Drain = &lullv1.DrainRequest{RequestID: id, PodUID: pod.UID, Reason: lullv1.DrainReasonIdle, Sequence: 1, RequestedAt: metav1.NewTime(t0.Add(-time.Second))}
		reported := metav1.NewTime(t0.Add(-time.Second))
		s.Status.Runtime = &lullv1.RuntimeReport{PodUID: pod.UID, State: lullv1.RuntimeServing,
			LastActivity: &last, RefreshSeconds: 10, ReportedAt: &reported}
		s.Status.Lifecycle = &lullv1.LifecycleStatus{IdlePodUID: pod.UID, IdleSince: &last, IdleActivity: &last}
	})
	setIdlePolicy(t, w, lullv1.IdlePolicy{SuspendAfter: &metav1.Duration{Duration: 30 * time.Minute}})
	createCatalog(t, w, "3")

	for range 3 {
		_, _ = w.reconcile()
	}

	sts := w.statefulSet()
	if len(w.deletes) > 0 {
		t.Errorf("pod alice-0 deleted (%d deletes) under an idle drain with StatefulSet alice holding %s, which the catalog refuses: the StatefulSet controller creates its successor on it",
			len(w.deletes), runtimeImage(sts))
	}
	if c := w.session().Status.Replacement; c != nil {
		t.Errorf("replacement %s committed onto a refused image; want nothing committed while it is refused", c.Reason)
	}
}
