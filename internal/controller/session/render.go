package session

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// RuntimeContainer is the name of the runtime container in a session pod.
const RuntimeContainer = "runtime"

// AnnotationSpecHash on a rendered object holds the hash of the spec lull
// rendered for it. The controller updates the object only when the hash of
// the newly rendered spec differs, so API-server defaulting never causes an
// update loop.
const AnnotationSpecHash = "lull.dev/spec-hash"

// labels returns the labels of every object rendered for a session.
func labels(s *lullv1.Session) map[string]string {
	return map[string]string{
		lullv1.LabelSession:  s.Name,
		lullv1.LabelTemplate: s.Spec.TemplateRef.Name,
	}
}

func objectMeta(s *lullv1.Session, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: s.Namespace, Labels: labels(s)}
}

// StatefulSet renders a session's StatefulSet: replicas as given (1, or 0
// once a suspended session has drained; see rollout.Replicas),
// updateStrategy OnDelete so only the controller replaces the pod, and a
// pod running the template's runtime as the session's own ServiceAccount.
// The runtime learns its session, namespace, pod name and pod UID from
// LULL_* variables (the pod fields through the downward API).
func StatefulSet(s *lullv1.Session, t *lullv1.SessionTemplate, replicas int32) *appsv1.StatefulSet {
	rt := t.Spec.Runtime
	env := append([]corev1.EnvVar{
		{Name: lullv1.EnvSessionName, Value: s.Name},
		{Name: lullv1.EnvSessionNamespace, ValueFrom: fieldRef("metadata.namespace")},
		{Name: lullv1.EnvPodName, ValueFrom: fieldRef("metadata.name")},
		{Name: lullv1.EnvPodUID, ValueFrom: fieldRef("metadata.uid")},
	}, rt.Env...)
	sts := &appsv1.StatefulSet{
		ObjectMeta: objectMeta(s, s.Name),
		Spec: appsv1.StatefulSetSpec{
			Replicas:            &replicas,
			ServiceName:         s.Name,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{lullv1.LabelSession: s.Name}},
			UpdateStrategy:      appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: merge(labels(s), map[string]string{lullv1.LabelTemplateRevision: TemplateRevision(t)})},
				Spec: corev1.PodSpec{
					ServiceAccountName:           lullv1.RuntimeIdentityName(s.Name),
					AutomountServiceAccountToken: ptr.To(true),
					EnableServiceLinks:           ptr.To(false),
					Containers: []corev1.Container{{
						Name:      RuntimeContainer,
						Image:     rt.Image,
						Command:   rt.Command,
						Args:      rt.Args,
						Env:       env,
						Resources: rt.Resources,
						Ports:     rt.Ports,
					}},
				},
			},
		},
	}
	stampHash(&sts.ObjectMeta, sts.Spec)
	return sts
}

// TemplateRevision identifies a template's runtime: the first 10 hex
// characters of the SHA-256 of its JSON encoding.
func TemplateRevision(t *lullv1.SessionTemplate) string {
	b, err := json.Marshal(t.Spec.Runtime)
	if err != nil {
		panic(err) // API types always marshal
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:10]
}

// Service renders the session's headless Service, which gives the pod a
// stable DNS name and exposes the runtime's ports.
func Service(s *lullv1.Session, t *lullv1.SessionTemplate) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: objectMeta(s, s.Name),
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			Selector:                 map[string]string{lullv1.LabelSession: s.Name},
			PublishNotReadyAddresses: true,
		},
	}
	for _, p := range t.Spec.Runtime.Ports {
		name := p.Name
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: name, Port: p.ContainerPort, Protocol: p.Protocol})
	}
	stampHash(&svc.ObjectMeta, svc.Spec)
	return svc
}

// ServiceAccount renders the runtime's identity.
func ServiceAccount(s *lullv1.Session) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: objectMeta(s, lullv1.RuntimeIdentityName(s.Name))}
}

// Role renders the runtime's permissions, and nothing more: get and watch on
// its own Session, patch on its own sessions/status. The status subresource
// discards every change outside .status, and lull's
// ValidatingAdmissionPolicy confines the runtime to status.runtime.
func Role(s *lullv1.Session) *rbacv1.Role {
	r := &rbacv1.Role{
		ObjectMeta: objectMeta(s, lullv1.RuntimeIdentityName(s.Name)),
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{lullv1.GroupVersion.Group}, Resources: []string{"sessions"}, ResourceNames: []string{s.Name}, Verbs: []string{"get", "watch"}},
			{APIGroups: []string{lullv1.GroupVersion.Group}, Resources: []string{"sessions/status"}, ResourceNames: []string{s.Name}, Verbs: []string{"patch"}},
		},
	}
	stampHash(&r.ObjectMeta, r.Rules)
	return r
}

// RoleBinding binds the runtime's Role to its ServiceAccount.
func RoleBinding(s *lullv1.Session) *rbacv1.RoleBinding {
	name := lullv1.RuntimeIdentityName(s.Name)
	rb := &rbacv1.RoleBinding{
		ObjectMeta: objectMeta(s, name),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: s.Namespace}},
	}
	stampHash(&rb.ObjectMeta, rb.Subjects)
	return rb
}

func fieldRef(path string) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
}

// stampHash records in meta the hash of what lull rendered for an object.
func stampHash(meta *metav1.ObjectMeta, spec any) {
	b, err := json.Marshal(spec)
	if err != nil {
		panic(err) // rendered API types always marshal
	}
	sum := sha256.Sum256(b)
	meta.Annotations = map[string]string{AnnotationSpecHash: hex.EncodeToString(sum[:])[:16]}
}
