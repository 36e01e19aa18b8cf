package template

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/catalog"
)

// ImageCondition is the template's ImageAllowed condition under the
// catalog (nil: there is none): True with reason NoCatalog or InCatalog,
// or False with reason ImageNotAllowed and a message naming the image, the
// namespace, the catalog and the fix. While it is False the rollout admits
// no session (rollout.NextTemplateStatus), and the session controller
// creates no pod from the image (its GateImage).
func ImageCondition(t *lullv1.SessionTemplate, cat *lullv1.RuntimeCatalog) metav1.Condition {
	c := metav1.Condition{Type: lullv1.ConditionImageAllowed, Status: metav1.ConditionTrue, Reason: lullv1.ReasonNoCatalog, ObservedGeneration: t.Generation}
	image := ""
	if rt := t.RuntimeContainer(); rt != nil {
		image = rt.Image
	}
	ok, why := catalog.Allowed(cat, t.Namespace, image)
	switch {
	case cat == nil:
		c.Message = why
	case ok:
		c.Reason, c.Message = lullv1.ReasonInCatalog, why
	default:
		c.Status, c.Reason = metav1.ConditionFalse, lullv1.ReasonImageNotAllowed
		c.Message = fmt.Sprintf("runtime image %s in namespace %s: %s; the rollout admits no session and no new pod runs it (running sessions are left alone) until the catalog lists it or the template names an image it lists (`lull catalog`)",
			image, t.Namespace, why)
	}
	return c
}

// allTemplates enqueues every template: a catalog edit may allow or refuse
// any of their images.
func (r *Reconciler) allTemplates(ctx context.Context, _ client.Object) []reconcile.Request {
	var list lullv1.SessionTemplateList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, t := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&t)})
	}
	return reqs
}
