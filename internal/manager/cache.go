package manager

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"lull.dev/lull/internal/rollout"
)

// stripForCache is the cache transform (client-go's TransformFunc) of every
// type the controller caches except Session (session.StripSessionForCache):
// it drops managedFields (but, of a pod, the times its container states
// were published: statusWriteTimes) and kubectl's last-applied-configuration
// annotation, which nothing in the controller reads and which are often the
// larger part of a small object (a pod's managed fields alone are a few
// KiB), and of the objects lull renders per session the parts of the spec
// the controller never reads from its cache (stripSpec). The controller
// writes with patches computed against the API server's copy (or, for
// metadata and replicas, merge patches of the fields they change), never
// an update of a cached object, so nothing stripped here is written back.
func stripForCache(in any) (any, error) {
	obj, err := meta.Accessor(in)
	if err != nil {
		return in, nil // a DeletedFinalStateUnknown tombstone: left as it is
	}
	// Set only when present: setting nil on an object without them
	// would allocate (kubernetes/kubernetes#124337).
	if mf := obj.GetManagedFields(); mf != nil {
		obj.SetManagedFields(statusWriteTimes(in, mf))
	}
	if a := obj.GetAnnotations(); a != nil {
		delete(a, corev1.LastAppliedConfigAnnotation)
	}
	stripSpec(in)
	return in, nil
}

// statusWriteTimes returns, of a pod's managed fields, only the writes
// that published its container states: each entry of the status
// subresource that owns status.containerStatuses
// (rollout.OwnsContainerStatuses; the kubelet's, KWOK's or the dev pod
// runner's), with its manager, operation, subresource and time, and for
// fields containerStatusesOwned, shared by every cached pod.
// rollout.StatusWrittenAt orders a runtime's report after the publication
// of its container's termination on the API server's one clock, and reads
// the same rule on a cached pod as on the API server's. Other writers of
// the pod's status (conditions of a readiness gate, DisruptionTarget) are
// dropped: at 5,000 pods the cache holds one entry of about 200 bytes per
// pod for each publisher, usually one. Nil for any other object.
func statusWriteTimes(in any, mf []metav1.ManagedFieldsEntry) []metav1.ManagedFieldsEntry {
	if _, ok := in.(*corev1.Pod); !ok {
		return nil
	}
	var out []metav1.ManagedFieldsEntry
	for _, e := range mf {
		if e.Subresource == "status" && e.Time != nil && e.FieldsV1 != nil && rollout.OwnsContainerStatuses(e.FieldsV1.Raw) {
			out = append(out, metav1.ManagedFieldsEntry{Manager: e.Manager, Operation: e.Operation, Subresource: e.Subresource, Time: e.Time,
				FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: containerStatusesOwned}})
		}
	}
	return out
}

// containerStatusesOwned is the fieldsV1 a cached pod's kept managed-fields
// entry shows: status.containerStatuses, nothing else. Read only; one
// array for every cached pod.
var containerStatusesOwned = []byte(`{"f:status":{"f:containerStatuses":{}}}`)

// stripSpec cuts, in place, the spec of a cached pod, StatefulSet, Node or
// ServiceAccount down to what the controller reads of the
// cached copy; at 1,000 sessions these specs were about a fifth of the
// controller's live heap. What is kept, and who reads it:
//
//   - pods: spec.nodeName (rollout.Decide names it for a pod stuck
//     terminating: delete the Node object if it is gone),
//     every reference to a ConfigMap (filesweep.Decide: a ConfigMap a pod
//     mounts is never deleted), every claim it mounts (rollout.PinnedTo:
//     does a claim's volume hold the pod on its drained node), each
//     container's name and image; status
//     whole (phase, conditions, container statuses: rollout.Decide and the
//     failure judgement);
//   - StatefulSets: replicas, selector, service name, update strategy,
//     claim retention and the claim templates' names (sameClaims), the pod
//     template's metadata and its spec cut as a pod's (the catalog gate
//     reads the runtime container's image, the files sweeper the ConfigMap
//     references); status whole;
//   - Nodes: spec.unschedulable and spec.taints (rollout.NodeDisruption:
//     is the node being drained), name and labels, and of the status only
//     the Ready condition's status, reason and transition time
//     (rollout.NodeLost: is the node lost; not its heartbeat or message);
//     no annotations (every node of the cluster is cached);
//   - ServiceAccounts: metadata only; Roles and RoleBindings whole (a few
//     rules and one subject: the Session reconciler compares them with what
//     it renders, and undoes a widening at once). Writes are computed
//     against the API server's copy (session.ensure).
//
// A reader of a field cut here sees it empty: TestStripSpecKeepsWhatReadersRead
// runs those readers on stripped and whole objects.
func stripSpec(in any) {
	switch o := in.(type) {
	case *corev1.Pod:
		o.Spec = podSpecForCache(&o.Spec)
	case *appsv1.StatefulSet:
		claims := make([]corev1.PersistentVolumeClaim, 0, len(o.Spec.VolumeClaimTemplates))
		for _, c := range o.Spec.VolumeClaimTemplates {
			claims = append(claims, corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: c.Name}})
		}
		o.Spec = appsv1.StatefulSetSpec{
			Replicas:                             o.Spec.Replicas,
			Selector:                             o.Spec.Selector,
			ServiceName:                          o.Spec.ServiceName,
			UpdateStrategy:                       o.Spec.UpdateStrategy,
			PersistentVolumeClaimRetentionPolicy: o.Spec.PersistentVolumeClaimRetentionPolicy,
			VolumeClaimTemplates:                 claims,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: o.Spec.Template.ObjectMeta,
				Spec:       podSpecForCache(&o.Spec.Template.Spec),
			},
		}
	case *corev1.ServiceAccount:
		o.Secrets, o.ImagePullSecrets = nil, nil
	case *corev1.Node:
		o.Spec = corev1.NodeSpec{Unschedulable: o.Spec.Unschedulable, Taints: o.Spec.Taints}
		o.Status = corev1.NodeStatus{Conditions: readyOnly(o.Status.Conditions)}
		o.Annotations = nil
	}
}

// readyOnly is the Ready condition of a Node's conditions, cut to what
// rollout.NodeLost reads (status, reason, lastTransitionTime); nil when
// there is none.
func readyOnly(cs []corev1.NodeCondition) []corev1.NodeCondition {
	for _, c := range cs {
		if c.Type == corev1.NodeReady {
			return []corev1.NodeCondition{{Type: c.Type, Status: c.Status, Reason: c.Reason, LastTransitionTime: c.LastTransitionTime}}
		}
	}
	return nil
}

// podSpecForCache is the part of a pod spec kept in the cache: the node,
// the containers' names and images, the claims it mounts, and every ConfigMap reference (volumes,
// projected sources, envFrom and env of every container kind).
func podSpecForCache(spec *corev1.PodSpec) corev1.PodSpec {
	out := corev1.PodSpec{NodeName: spec.NodeName}
	for _, v := range spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			out.Volumes = append(out.Volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{ConfigMap: v.ConfigMap}})
		case v.PersistentVolumeClaim != nil:
			out.Volumes = append(out.Volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: v.PersistentVolumeClaim}})
		case v.Projected != nil:
			var sources []corev1.VolumeProjection
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil {
					sources = append(sources, corev1.VolumeProjection{ConfigMap: s.ConfigMap})
				}
			}
			if sources != nil {
				out.Volumes = append(out.Volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: sources}}})
			}
		}
	}
	out.InitContainers = containersForCache(spec.InitContainers)
	out.Containers = containersForCache(spec.Containers)
	for _, c := range spec.EphemeralContainers {
		kept := containerForCache(corev1.Container{Name: c.Name, Image: c.Image, EnvFrom: c.EnvFrom, Env: c.Env})
		out.EphemeralContainers = append(out.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon(kept)})
	}
	return out
}

func containersForCache(cs []corev1.Container) []corev1.Container {
	if cs == nil {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i := range cs {
		out[i] = containerForCache(cs[i])
	}
	return out
}

// containerForCache keeps a container's name, image and ConfigMap
// references.
func containerForCache(c corev1.Container) corev1.Container {
	out := corev1.Container{Name: c.Name, Image: c.Image}
	for _, f := range c.EnvFrom {
		if f.ConfigMapRef != nil {
			out.EnvFrom = append(out.EnvFrom, corev1.EnvFromSource{ConfigMapRef: f.ConfigMapRef})
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
			out.Env = append(out.Env, corev1.EnvVar{Name: e.Name, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: e.ValueFrom.ConfigMapKeyRef}})
		}
	}
	return out
}
