package session

import (
	"bytes"
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Guarantee 5 (issue 21: owned fields compared; drift corrected with an
// Event), against the lull.dev/spec-written record (review round 2).
//
// A write of the spec claims, in the same request, the lowest generation
// it can produce, and the record is raised from the response by a second,
// metadata-only write. That second write can be lost (a timeout, a 500,
// an etcd leader change, a webhook that refuses it once) in a controller
// that keeps running, and another writer's edit can land before the
// retry. Whatever the first write did (changed the spec; or nothing, as
// admission put the new render back whole), the record left standing
// must not name the generation of that edit. It did when a new render
// claimed one generation more than it was computed on: admission put the
// render back, the correction was lost, and the next edit (the runtime
// made privileged) landed at exactly the claimed generation, taken for
// lull's own for good, with no Event.
func TestLostRecordCorrectionDoesNotMakeTheNextEditLulls(t *testing.T) {
	for _, tc := range []struct {
		name string
		// frozen: admission puts the pod template back whole.
		frozen bool
	}{{"a new render admission puts back whole", true}, {"a new render", false}} {
		t.Run(tc.name, func(t *testing.T) {
			var frozen *corev1.PodTemplateSpec
			webhook := func(s *appsv1.StatefulSet) {
				if frozen != nil {
					s.Spec.Template = *frozen.DeepCopy()
				}
			}
			server := apiServerStatefulSets(webhook)
			failCorrection := false
			w, _ := driftWorldWith(t, webhook, interceptor.Funcs{
				Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
					if _, ok := o.(*appsv1.StatefulSet); ok && failCorrection {
						data, _ := p.Data(o)
						if bytes.Contains(data, []byte(`"uid"`)) && bytes.Contains(data, []byte(lullv1.AnnotationSpecWritten)) && !bytes.Contains(data, []byte(`"spec"`)) {
							failCorrection = false
							return apierrors.NewServerTimeout(schema.GroupResource{Group: "apps", Resource: "statefulsets"}, "patch", 1)
						}
					}
					return server.Patch(ctx, c, o, p, opts...)
				},
			})
			if tc.frozen {
				frozen = w.statefulSet().Spec.Template.DeepCopy()
			}
			failCorrection = true
			w.setImage("example.com/agent:3")
			_, err := w.reconcile()
			if attempted := !failCorrection; attempted && err == nil {
				t.Fatalf("the correction write's failure was not returned")
			}
			failCorrection = false
			frozen = nil // the policy engine is reconfigured; a person edits the StatefulSet
			w.handEdit(privileged)
			w.reconcileOK()
			w.reconcileOK()
			if isPrivileged(w.statefulSet()) {
				t.Errorf("after a lost correction of the record, another writer's next edit (runtime privileged) is taken for lull's own write and kept")
			}
			if n := w.count(lullv1.ReasonDriftCorrected); n != 1 {
				t.Errorf("%s Events = %d, want 1", lullv1.ReasonDriftCorrected, n)
			}
		})
	}
}
