package session

import (
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/index"
)

// withSessionIndex registers index.SessionLabel on the fake client for every
// kind the reaper lists, and the refusal indexes (IndexQuotaRefused,
// IndexInvolvedUID), as SetupWithManager does on the cache.
func withSessionIndex(b *fake.ClientBuilder, sch *runtime.Scheme) *fake.ClientBuilder {
	b = b.WithScheme(sch)
	for _, list := range sessionKinds() {
		gvk, err := apiutilGVK(list, sch)
		if err != nil {
			panic(err)
		}
		obj, err := sch.New(gvk)
		if err != nil {
			panic(err)
		}
		b = b.WithIndex(obj.(client.Object), index.SessionLabel, index.SessionLabelOf)
	}
	b = b.WithIndex(&corev1.Pod{}, index.PodNodeName, index.PodNodeNameOf)
	b = b.WithIndex(&policyv1.PodDisruptionBudget{}, index.BudgetOwner, index.BudgetOwnerOf)
	if sch.Recognizes(lullv1.GroupVersion.WithKind("Session")) {
		b = b.WithIndex(&lullv1.Session{}, IndexQuotaRefused, quotaRefused)
	}
	return b.WithIndex(&corev1.Event{}, IndexInvolvedUID, involvedUID)
}
