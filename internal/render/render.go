// Package render holds what lull renders from a SessionTemplate: a
// session's StatefulSet (its pod template with what lull owns added), its
// headless Service and its runtime's identity (ServiceAccount, Role,
// RoleBinding), the template's content-addressed files ConfigMap and its
// revision, and Validate, the checks of a template only the controller can
// make. Every function is pure: the same session and template give the
// same objects, so re-rendering never changes a StatefulSet's template
// unless the template changed. The Session reconciler writes these
// objects; the template controller creates the files ConfigMap; the files
// sweeper computes the same names. Its tests are beside it; the template
// fixtures they share with the reconciler's tests are in package
// rendertest.
package render

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/catalog"
)

// AnnotationSpecHash on a rendered object holds the hash of the spec lull
// rendered for it. The controller updates the object only when the hash of
// the newly rendered spec differs, so API-server defaulting never causes an
// update loop.
const AnnotationSpecHash = "lull.dev/spec-hash"

// AnnotationClaimTemplatesHash on a session's StatefulSet holds the hash of
// the claim templates it was created with. A StatefulSet's claim templates
// cannot change, so a template whose claim templates differ from it (one
// deleted and created again under its name) is refused for the session
// instead of replacing its pod for claims it would never get.
const AnnotationClaimTemplatesHash = "lull.dev/claim-templates-hash"

// labels returns the labels of every object rendered for a session.
func labels(s *lullv1.Session) map[string]string {
	return map[string]string{
		lullv1.LabelSession:  s.Name,
		lullv1.LabelTemplate: s.Spec.TemplateRef.Name,
	}
}

// union returns a new map with the entries of every map in ms, a later
// map's value winning for a key in several.
func union(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		maps.Copy(out, m)
	}
	return out
}

// objectMeta is the metadata of an object lull renders for a session: its
// labels and lull.dev/session-uid, which tells the session's own object
// that lost its owner reference from a predecessor's (see package orphan).
// The pod template does not carry it (see Pod).
func objectMeta(s *lullv1.Session, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: s.Namespace, Labels: union(labels(s), map[string]string{lullv1.LabelSessionUID: string(s.UID)})}
}

// StatefulSet renders a session's StatefulSet: replicas as given (1, or 0
// once a suspended session has drained; see rollout.Replicas),
// updateStrategy OnDelete so only the controller replaces the pod, the
// template's claim templates and retention policy, and the template's pod
// with what lull owns added (see Pod). It fails with field errors naming
// what in the template collides with lull (see Validate).
func StatefulSet(s *lullv1.Session, t *lullv1.SessionTemplate, replicas int32) (*appsv1.StatefulSet, error) {
	if errs := Validate(t); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	sts := &appsv1.StatefulSet{
		ObjectMeta: objectMeta(s, s.Name),
		Spec: appsv1.StatefulSetSpec{
			Replicas:                             &replicas,
			ServiceName:                          s.Name,
			PodManagementPolicy:                  appsv1.ParallelPodManagement,
			Selector:                             &metav1.LabelSelector{MatchLabels: map[string]string{lullv1.LabelSession: s.Name}},
			UpdateStrategy:                       appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType},
			Template:                             Pod(s, t),
			VolumeClaimTemplates:                 claimTemplates(t),
			PersistentVolumeClaimRetentionPolicy: retentionPolicy(t),
		},
	}
	stampHash(&sts.ObjectMeta, sts.Spec)
	sts.Annotations[AnnotationClaimTemplatesHash] = hash(sts.Spec.VolumeClaimTemplates)
	return sts, nil
}

// Pod renders the pod template of a session: the SessionTemplate's
// spec.template, deep-copied, with what lull owns set on it:
//
//   - labels lull.dev/session, lull.dev/template and
//     lull.dev/template-revision (the template's keys are kept);
//   - serviceAccountName, the session's own runtime identity;
//   - automountServiceAccountToken, true, or false with the agent sidecar
//     (whose projected token only the sidecar mounts);
//   - enableServiceLinks false unless the template says otherwise: every
//     session has a Service, and a namespace of thousands of sessions
//     would give each pod thousands of variables;
//   - the runtime container's LULL_* environment, first, so the template's
//     own variables may refer to them ($(LULL_SESSION_NAME));
//   - with spec.agent, the sidecar (first init container), its volumes,
//     the socket volume mounted in the runtime container and
//     LULL_AGENT_SOCKET.
//   - with spec.files, the volume lull-files (the files ConfigMap, named
//     by their content: see FilesConfigMap) mounted read-only at
//     spec.files.mountPath in the runtime container.
//
// Everything else passes through untouched. The result depends only on
// the session's name and the template's spec, so re-rendering never changes
// the StatefulSet's template (and never creates a ControllerRevision)
// unless the template changed.
func Pod(s *lullv1.Session, t *lullv1.SessionTemplate) corev1.PodTemplateSpec {
	tpl := *t.Spec.Template.DeepCopy()
	tpl.Labels = union(tpl.Labels, labels(s), map[string]string{lullv1.LabelTemplateRevision: TemplateRevision(t)})
	spec := &tpl.Spec
	spec.ServiceAccountName = lullv1.RuntimeIdentityName(s.Name)
	spec.AutomountServiceAccountToken = ptr.To(t.Spec.Agent == nil)
	if spec.EnableServiceLinks == nil {
		spec.EnableServiceLinks = ptr.To(false)
	}
	rt := runtimeContainer(spec)
	rt.Env = append(lullEnv(s), rt.Env...)
	if a := t.Spec.Agent; a != nil {
		rt.Env = append(rt.Env, corev1.EnvVar{Name: lullv1.EnvAgentSocket, Value: lullv1.AgentSocketPath})
		rt.VolumeMounts = append(rt.VolumeMounts, corev1.VolumeMount{Name: lullv1.AgentSocketVolume, MountPath: lullv1.AgentSocketDir})
		spec.InitContainers = append([]corev1.Container{agentContainer(s, a)}, spec.InitContainers...)
		spec.Volumes = append(spec.Volumes, agentVolumes()...)
	}
	if t.Spec.Files != nil {
		rt.VolumeMounts = append(rt.VolumeMounts, filesMount(t))
		spec.Volumes = append(spec.Volumes, filesVolume(t))
	}
	return tpl
}

// lullEnv is what lull tells a session's runtime (and agent) about itself:
// its session, namespace, pod name and pod UID (the pod fields through the
// downward API).
func lullEnv(s *lullv1.Session) []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: lullv1.EnvSessionName, Value: s.Name},
		{Name: lullv1.EnvSessionNamespace, ValueFrom: fieldRef("metadata.namespace")},
		{Name: lullv1.EnvPodName, ValueFrom: fieldRef("metadata.name")},
		{Name: lullv1.EnvPodUID, ValueFrom: fieldRef("metadata.uid")},
	}
}

// runtimeContainer returns the container named runtime; Validate has made
// sure there is exactly one.
func runtimeContainer(spec *corev1.PodSpec) *corev1.Container {
	for i := range spec.Containers {
		if spec.Containers[i].Name == lullv1.RuntimeContainerName {
			return &spec.Containers[i]
		}
	}
	panic("session: render without a runtime container") // Validate refuses it
}

// AgentTokenExpiry is the lifetime asked for the sidecar's projected token;
// the kubelet refreshes it at 80 %.
const AgentTokenExpiry = 3600 * time.Second

// agentContainer is the injected sidecar: the image's entrypoint (the
// lull-agent binary) with lull's flags as arguments, on the shared
// socket, its turn table in a volume of its own, the session's token
// mounted where client-go's in-cluster config reads it, and no privilege it
// does not need.
func agentContainer(s *lullv1.Session, a *lullv1.AgentSpec) corev1.Container {
	image := a.Image
	if image == "" {
		image = lullv1.DefaultAgentImage
	}
	return corev1.Container{
		Name:          lullv1.AgentContainerName,
		Image:         image,
		Command:       legacyAgentCommand(image),
		Args:          agentArgs(a),
		Env:           lullEnv(s),
		Resources:     a.Resources,
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		VolumeMounts: []corev1.VolumeMount{
			{Name: lullv1.AgentSocketVolume, MountPath: lullv1.AgentSocketDir},
			{Name: lullv1.AgentStateVolume, MountPath: lullv1.AgentStateDir},
			{Name: lullv1.AgentTokenVolume, MountPath: lullv1.AgentTokenDir, ReadOnly: true},
		},
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			RunAsNonRoot:             ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
}

// LegacyAgentRepository is the image repository the CRD defaulted
// spec.agent.image to before the lull-agent image: the whole `lull` binary,
// whose sidecar is its `agent` command.
const LegacyAgentRepository = "ghcr.io/lull-dev/lull"

// legacyAgentCommand returns the command of a sidecar whose image is in
// LegacyAgentRepository: `lull agent`, as lull rendered it before; nil (the
// image's entrypoint) for any other image. A CRD default is stored in the
// object, so every template created with `agent: {}` before the lull-agent
// image still names the former default; without its command, its sidecar
// would run that image's entrypoint with the agent's flags and never
// start, and an upgrade of the controller would drain every agent session
// into such a pod. With it, those pods render exactly as before, and the
// upgrade replaces none of them (docs/templates.md).
func legacyAgentCommand(image string) []string {
	if catalog.Parse(image).Repository != LegacyAgentRepository {
		return nil
	}
	return []string{"lull", "agent"}
}

// agentVolumes are the sidecar's volumes: the socket directory it shares
// with the runtime container, its state directory, and the projected
// ServiceAccount token (with the cluster CA and the namespace, as the
// kubelet's automounted volume has them).
func agentVolumes() []corev1.Volume {
	return []corev1.Volume{
		{Name: lullv1.AgentSocketVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: lullv1.AgentStateVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: lullv1.AgentTokenVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To(int64(AgentTokenExpiry / time.Second))}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
				{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
			},
		}}},
	}
}

// claimTemplates returns the template's claim templates as the StatefulSet
// takes them.
func claimTemplates(t *lullv1.SessionTemplate) []corev1.PersistentVolumeClaim {
	var out []corev1.PersistentVolumeClaim
	for _, c := range t.Spec.VolumeClaimTemplates {
		out = append(out, *c.DeepCopy())
	}
	return out
}

// retentionPolicy is the template's, or the default: claims deleted with
// the Session, kept while it is suspended.
func retentionPolicy(t *lullv1.SessionTemplate) *appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy {
	if p := t.Spec.PersistentVolumeClaimRetentionPolicy; p != nil {
		return p.DeepCopy()
	}
	return &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
		WhenDeleted: appsv1.DeletePersistentVolumeClaimRetentionPolicyType,
		WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
	}
}

// TemplateRevision identifies a template's pod: the first 10 hex
// characters of the SHA-256 of the JSON encoding of its spec.template,
// spec.volumeClaimTemplates, spec.agent and spec.files (the update policy
// is not part of it: changing how to roll out is not something to roll
// out). Files enter as their mount path and content address (FilesHash),
// and only when set, so a template without files keeps its revision.
func TemplateRevision(t *lullv1.SessionTemplate) string {
	type files struct {
		MountPath string `json:"mountPath"`
		Hash      string `json:"hash"`
	}
	var f *files
	if t.Spec.Files != nil {
		f = &files{MountPath: t.Spec.Files.MountPath, Hash: FilesHash(t.Spec.Files)}
	}
	b, err := json.Marshal(struct {
		Template             corev1.PodTemplateSpec         `json:"template"`
		VolumeClaimTemplates []corev1.PersistentVolumeClaim `json:"volumeClaimTemplates,omitempty"`
		Agent                *lullv1.AgentSpec              `json:"agent,omitempty"`
		Files                *files                         `json:"files,omitempty"`
	}{t.Spec.Template, t.Spec.VolumeClaimTemplates, t.Spec.Agent, f})
	if err != nil {
		panic(err) // API types always marshal
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:10]
}

// Service renders the session's headless Service, which gives the pod a
// stable DNS name and exposes the runtime container's ports.
func Service(s *lullv1.Session, t *lullv1.SessionTemplate) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: objectMeta(s, s.Name),
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			Selector:                 map[string]string{lullv1.LabelSession: s.Name},
			PublishNotReadyAddresses: true,
		},
	}
	for _, c := range t.Spec.Template.Spec.Containers {
		if c.Name != lullv1.RuntimeContainerName {
			continue
		}
		for _, p := range c.Ports {
			svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: p.Name, Port: p.ContainerPort, Protocol: p.Protocol})
		}
	}
	stampHash(&svc.ObjectMeta, svc.Spec)
	return svc
}

// PodDisruptionBudget renders the budget that guards a session's pod
// against evictions (nodeDrainPolicy strategy Drain), named as its
// StatefulSet: maxUnavailable 0 over the session's pod as long as it is
// not labelled lull.dev/drained. The Eviction API answers 429 for the pod
// (the answer kubectl drain, the autoscalers and node upgrades retry on)
// until lull has drained and committed it and labels it for the node's
// drain (the hand-off); lull's own deletes, plain DELETEs, are never held
// by it. unhealthyPodEvictionPolicy is left to its default
// (IfHealthyBudget).
func PodDisruptionBudget(s *lullv1.Session) *policyv1.PodDisruptionBudget {
	zero := intstr.FromInt32(0)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: objectMeta(s, s.Name),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: &zero,
			Selector: &metav1.LabelSelector{
				MatchLabels:      map[string]string{lullv1.LabelSession: s.Name},
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: lullv1.LabelDrained, Operator: metav1.LabelSelectorOpDoesNotExist}},
			},
		},
	}
	stampHash(&pdb.ObjectMeta, pdb.Spec)
	return pdb
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
	meta.Annotations = map[string]string{AnnotationSpecHash: hash(spec)}
}

// hash is the first 16 hex characters of the SHA-256 of v's JSON encoding.
func hash(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // rendered API types always marshal
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16]
}

// agentArgs is the agent sidecar's command line.
func agentArgs(a *lullv1.AgentSpec) []string {
	args := []string{"--listen=unix://" + lullv1.AgentSocketPath, "--socket-mode=0666", "--state-file=" + lullv1.AgentStateFile}
	if a.ReportRefresh != nil {
		args = append(args, "--report-refresh="+a.ReportRefresh.Duration.String())
	}
	return args
}
