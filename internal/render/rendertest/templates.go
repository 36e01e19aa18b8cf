// Package rendertest holds the SessionTemplate fixtures that the tests of
// package render and of the controllers that write its objects
// (internal/controller/session) share: one realistic template, the
// session "alice" of it, and the same template with files.
package rendertest

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// AgentTemplate returns a new copy of a template as a platform team
// writes it for an AI agent runtime: a sandboxed runtime class, node
// placement, a workspace claim, an init container, a sidecar, probes, pod
// labels and annotations. It is agents/coder, valid, with no agent
// sidecar and no files; callers edit their copy.
func AgentTemplate() *lullv1.SessionTemplate {
	return &lullv1.SessionTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "agents", Name: "coder"},
		Spec: lullv1.SessionTemplateSpec{
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      map[string]string{"app.kubernetes.io/name": "coder"},
					Annotations: map[string]string{"example.com/team": "agents"},
				},
				Spec: corev1.PodSpec{
					RuntimeClassName:              ptr.To("gvisor"),
					NodeSelector:                  map[string]string{"pool": "sessions"},
					Tolerations:                   []corev1.Toleration{{Key: "sessions", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
					ImagePullSecrets:              []corev1.LocalObjectReference{{Name: "registry"}},
					SecurityContext:               &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), FSGroup: ptr.To[int64](1000)},
					PriorityClassName:             "sessions",
					TerminationGracePeriodSeconds: ptr.To[int64](60),
					InitContainers: []corev1.Container{{
						Name: "clone", Image: "example.com/git:2", Args: []string{"clone", "https://example.com/repo", "/workspace/repo"},
						VolumeMounts: []corev1.VolumeMount{{Name: "workspace", MountPath: "/workspace"}},
					}},
					Containers: []corev1.Container{
						{
							Name: "runtime", Image: "example.com/agent-runtime:1.42", Args: []string{"--model=large"},
							Env:            []corev1.EnvVar{{Name: "WORKSPACE", Value: "/workspace"}, {Name: "SESSION", Value: "$(LULL_SESSION_NAME)"}},
							Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
							Resources:      corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi")}},
							VolumeMounts:   []corev1.VolumeMount{{Name: "workspace", MountPath: "/workspace"}, {Name: "tmp", MountPath: "/tmp"}},
							ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}}},
						},
						{Name: "proxy", Image: "example.com/egress-proxy:3"},
					},
					Volumes: []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "workspace"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					StorageClassName: ptr.To("fast"),
					Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}},
				},
			}},
		},
	}
}

// Alice returns the Session "alice" of template t, in t's namespace.
func Alice(t *lullv1.SessionTemplate) *lullv1.Session {
	return &lullv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: t.Namespace, Name: "alice"},
		Spec: lullv1.SessionSpec{TemplateRef: lullv1.TemplateReference{Name: t.Name}}}
}

// FilesTemplate returns AgentTemplate with spec.files: items mounted at
// /etc/runtime.
func FilesTemplate(items ...lullv1.FileItem) *lullv1.SessionTemplate {
	tmpl := AgentTemplate()
	tmpl.Spec.Files = &lullv1.Files{MountPath: "/etc/runtime", Items: items}
	return tmpl
}

// Text returns a files item of text content (a ConfigMap's data).
func Text(name, content string) lullv1.FileItem {
	return lullv1.FileItem{Name: name, Content: ptr.To(content)}
}

// Bin returns a files item of binary content (a ConfigMap's binaryData).
func Bin(name string, b []byte) lullv1.FileItem {
	return lullv1.FileItem{Name: name, BinaryContent: b}
}
