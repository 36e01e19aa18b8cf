package session

import (
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// withSessionIndex registers IndexSessionLabel on the fake client for every
// kind the reaper lists, as SetupWithManager does on the cache.
func withSessionIndex(b *fake.ClientBuilder, sch *runtime.Scheme) *fake.ClientBuilder {
	for _, list := range sessionKinds() {
		gvk, err := apiutilGVK(list, sch)
		if err != nil {
			panic(err)
		}
		obj, err := sch.New(gvk)
		if err != nil {
			panic(err)
		}
		b = b.WithIndex(obj.(client.Object), IndexSessionLabel, sessionLabelValue)
	}
	return b
}
