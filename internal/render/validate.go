package render

import (
	"path"
	"strings"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Validate returns what in a template collides with what lull adds to
// every session pod, as field errors with the template's field paths
// ("spec.template.spec.containers[0].env[2].name"). The SessionTemplate
// CRD refuses the simple cases at admission (a missing runtime container, a
// serviceAccountName, a restartPolicy, lull's labels, reserved names); the
// checks here walk nested lists, which CEL's cost budget does not allow over
// lists as long as a pod's, so they are judged when a session is rendered
// and reported as its RenderFailed condition, and nothing already running
// is touched.
func Validate(t *lullv1.SessionTemplate) field.ErrorList {
	var errs field.ErrorList
	spec := &t.Spec.Template.Spec
	path := field.NewPath("spec", "template", "spec")
	runtimes := 0
	for i := range spec.Containers {
		if spec.Containers[i].Name == lullv1.RuntimeContainerName {
			runtimes++
		}
	}
	if runtimes != 1 {
		errs = append(errs, field.Invalid(path.Child("containers"), runtimes,
			"exactly one container must be named runtime: it is the session's runtime, drained between turns"))
	}
	for _, list := range []struct {
		name       string
		containers []corev1.Container
	}{{"initContainers", spec.InitContainers}, {"containers", spec.Containers}} {
		for i := range list.containers {
			c := &list.containers[i]
			cp := path.Child(list.name).Index(i)
			errs = append(errs, reservedEnv(cp, c)...)
			for j, m := range c.VolumeMounts {
				if strings.HasPrefix(m.Name, "lull-") {
					errs = append(errs, field.Invalid(cp.Child("volumeMounts").Index(j).Child("name"), m.Name,
						"volumes whose names start with lull- are lull's (the agent's socket, state and token); mount a volume of your own"))
				}
			}
			if list.name == "containers" && c.Name == lullv1.RuntimeContainerName {
				errs = append(errs, runtimeContainerErrors(cp, c, t.Spec.Agent != nil)...)
			}
		}
	}
	errs = append(errs, claimErrors(t)...)
	if f := t.Spec.Files; f != nil {
		errs = append(errs, filesErrors(f)...)
		errs = append(errs, filesMountErrors(t)...)
	}
	if t.Spec.Agent != nil {
		errs = append(errs, tokenPaths(t)...)
	}
	return errs
}

// tokenPaths refuses, with the agent sidecar, the ways a pod spec itself
// would hand the session's token to code outside the sidecar: a projected
// ServiceAccount token for the API server (no audience: the API server's
// own), and a process namespace shared with the sidecar (a root process
// reads another container's files through /proc/<pid>/root). A token for
// another audience (a cloud provider's workload identity) is allowed: the
// API server does not accept it. What reaches past the pod (privileged
// containers, hostPath, hostPID) is for Pod Security Admission to refuse.
func tokenPaths(t *lullv1.SessionTemplate) field.ErrorList {
	var errs field.ErrorList
	spec := &t.Spec.Template.Spec
	path := field.NewPath("spec", "template", "spec")
	for i, v := range spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for j, src := range v.Projected.Sources {
			if src.ServiceAccountToken != nil && src.ServiceAccountToken.Audience == "" {
				errs = append(errs, field.Invalid(path.Child("volumes").Index(i).Child("projected", "sources").Index(j).Child("serviceAccountToken", "audience"), "",
					"with spec.agent only the agent sidecar holds a token for the API server; set an audience other than the API server's, or remove the source"))
			}
		}
	}
	if ptrTrue(spec.ShareProcessNamespace) {
		errs = append(errs, field.Invalid(path.Child("shareProcessNamespace"), true,
			"with spec.agent the containers must not share a process namespace: a process could read the sidecar's token through /proc; remove the field"))
	}
	if spec.HostPID {
		errs = append(errs, field.Invalid(path.Child("hostPID"), true,
			"with spec.agent a pod must not use the node's process namespace: a process could read the sidecar's token through /proc; remove the field"))
	}
	return errs
}

func ptrTrue(b *bool) bool { return b != nil && *b }

// claimErrors refuses claim templates whose names repeat or are taken by a
// volume of the pod: the StatefulSet adds each claim to the pod as a volume
// of the claim template's name.
func claimErrors(t *lullv1.SessionTemplate) field.ErrorList {
	var errs field.ErrorList
	volumes := map[string]bool{}
	for _, v := range t.Spec.Template.Spec.Volumes {
		volumes[v.Name] = true
	}
	seen := map[string]bool{}
	for i, c := range t.Spec.VolumeClaimTemplates {
		fp := field.NewPath("spec", "volumeClaimTemplates").Index(i).Child("metadata", "name")
		switch {
		case strings.HasPrefix(c.Name, "lull-"):
			errs = append(errs, field.Invalid(fp, c.Name,
				"names starting with lull- are reserved for the volumes lull adds, and the StatefulSet adds each claim as a volume named like its template; rename the claim template"))
		case seen[c.Name]:
			errs = append(errs, field.Duplicate(fp, c.Name))
		case volumes[c.Name]:
			errs = append(errs, field.Invalid(fp, c.Name,
				"spec.template.spec.volumes has a volume of this name, and the StatefulSet adds each claim as a volume named like its template; rename one of them"))
		}
		seen[c.Name] = true
	}
	return errs
}

// reservedEnv refuses variables a container would take from lull's LULL_
// namespace, by name or by an envFrom prefix.
func reservedEnv(path *field.Path, c *corev1.Container) field.ErrorList {
	var errs field.ErrorList
	for j, e := range c.Env {
		if strings.HasPrefix(e.Name, "LULL_") {
			errs = append(errs, field.Invalid(path.Child("env").Index(j).Child("name"), e.Name,
				"names starting with LULL_ are reserved for what lull tells the runtime; rename the variable"))
		}
	}
	for j, e := range c.EnvFrom {
		if strings.HasPrefix(e.Prefix, "LULL_") {
			errs = append(errs, field.Invalid(path.Child("envFrom").Index(j).Child("prefix"), e.Prefix,
				"the prefix LULL_ is reserved for what lull tells the runtime; choose another prefix"))
		}
	}
	return errs
}

// runtimeContainerErrors checks the runtime container: its ports become the
// session Service's, which needs a name for each when there are several,
// and with the agent sidecar lull mounts the socket directory into it.
func runtimeContainerErrors(fp *field.Path, c *corev1.Container, agent bool) field.ErrorList {
	var errs field.ErrorList
	if strings.ContainsFunc(c.Image, unicode.IsSpace) {
		errs = append(errs, field.Invalid(fp.Child("image"), c.Image, "an image reference contains no whitespace"))
	}
	if len(c.Ports) > 1 {
		for j, p := range c.Ports {
			if p.Name == "" {
				errs = append(errs, field.Required(fp.Child("ports").Index(j).Child("name"),
					"with more than one port, every port needs a name (the session's Service requires it)"))
			}
		}
	}
	if agent {
		for j, m := range c.VolumeMounts {
			if path.Clean(m.MountPath) == lullv1.AgentSocketDir {
				errs = append(errs, field.Invalid(fp.Child("volumeMounts").Index(j).Child("mountPath"), m.MountPath,
					"with spec.agent, lull mounts the agent's socket directory at "+lullv1.AgentSocketDir+" in the runtime container; mount this volume elsewhere"))
			}
		}
	}
	return errs
}
