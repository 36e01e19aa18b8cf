package session

import (
	"context"
	"testing"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
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
	ctx := context.Background()
	w := committedIdleWorld(t, interceptor.Funcs{})
	cat := &lullv1.RuntimeCatalog{ObjectMeta: metav1.ObjectMeta{Name: lullv1.RuntimeCatalogName},
		Spec: lullv1.RuntimeCatalogSpec{Images: []lullv1.CatalogImage{{Repository: "example.com/agent", Tags: []string{"3"}}}}}
	if err := w.c.Create(ctx, cat); err != nil {
		t.Fatal(err)
	}
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
