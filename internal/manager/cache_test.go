package manager

import (
	"time"

	"lull.dev/lull/internal/render"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"testing"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/catalog/catalogtest"
	"lull.dev/lull/internal/controller/filesweep"
	"lull.dev/lull/internal/controller/session"
	"lull.dev/lull/internal/rollout"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestStripForCache(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p",
		Annotations:   map[string]string{corev1.LastAppliedConfigAnnotation: "{}", "keep": "me"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}}}}
	out, err := stripForCache(pod)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Pod)
	if got.ManagedFields != nil {
		t.Errorf("managed fields kept: %v", got.ManagedFields)
	}
	if _, ok := got.Annotations[corev1.LastAppliedConfigAnnotation]; ok || got.Annotations["keep"] != "me" {
		t.Errorf("annotations = %v, want all but %s", got.Annotations, corev1.LastAppliedConfigAnnotation)
	}
	if out, err := stripForCache("tombstone"); err != nil || out != "tombstone" {
		t.Errorf("not an object: %v, %v; want it passed through", out, err)
	}
}

// A cached pod keeps, of its managed fields, only the writes that
// published its container states (rollout.StatusWrittenAt), with their
// times and no other fields; another party's status write (a condition)
// and spec writes go, and other objects keep none. What is kept reads the
// same under rollout.StatusWrittenAt as the API server's copy.
func TestStripForCacheKeepsOnlyWhenAPodsContainerStatesWerePublished(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	later := metav1.NewTime(at.Add(5 * time.Second))
	entries := func() []metav1.ManagedFieldsEntry {
		return []metav1.ManagedFieldsEntry{
			{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, Time: &later, FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)}},
			{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", Time: &at,
				FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:conditions":{},"f:containerStatuses":{},"f:phase":{}}}`)}},
			{Manager: "readiness-gate", Operation: metav1.ManagedFieldsOperationApply, Subresource: "status", Time: &later,
				FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:conditions":{}}}`)}},
		}
	}
	whole := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", ManagedFields: entries()}}
	out, _ := stripForCache(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", ManagedFields: entries()}})
	got := out.(*corev1.Pod)
	want := []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", Time: &at,
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:containerStatuses":{}}}`)}}}
	if !equality.Semantic.DeepEqual(got.ManagedFields, want) {
		t.Errorf("pod's managed fields = %+v, want %+v", got.ManagedFields, want)
	}
	if c, w := rollout.StatusWrittenAt(got), rollout.StatusWrittenAt(whole); !c.Equal(w) || !w.Equal(at.Time) {
		t.Errorf("StatusWrittenAt of the cached pod = %s, of the API server's = %s; want both %s", c, w, at)
	}
	out, _ = stripForCache(&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "s", ManagedFields: entries()}})
	if mf := out.(*appsv1.StatefulSet).ManagedFields; mf != nil {
		t.Errorf("StatefulSet's managed fields kept: %+v", mf)
	}
}

// filesConfigMap is a ConfigMap the files sweeper takes for lull's, with
// content that makes its name distinct.
func filesConfigMap(content string) corev1.ConfigMap {
	cm := corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", UID: types.UID("uid-" + content), ResourceVersion: "1"},
		Data: map[string]string{"f": content}}
	h := render.ConfigMapFilesHash(&cm)
	cm.Name = "t-files-" + h
	cm.Labels = map[string]string{lullv1.LabelTemplate: "t", lullv1.LabelFiles: h}
	return cm
}

// wholePodSpec names a ConfigMap in every place a pod spec can, and carries
// the rest a rendered session pod has (probes, resources, a projected token).
func wholePodSpec(cms []corev1.ConfigMap) corev1.PodSpec {
	ref := func(i int) corev1.LocalObjectReference { return corev1.LocalObjectReference{Name: cms[i].Name} }
	noise := corev1.Container{
		Command:        []string{"/runtime", "--serve"},
		Resources:      corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz"}}},
		Env:            []corev1.EnvVar{{Name: "PLAIN", Value: "x"}, {Name: "SECRET", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}}},
	}
	with := func(name, image string, envFrom []corev1.EnvFromSource, env ...corev1.EnvVar) corev1.Container {
		c := *noise.DeepCopy()
		c.Name, c.Image, c.EnvFrom = name, image, envFrom
		c.Env = append(c.Env, env...)
		return c
	}
	return corev1.PodSpec{
		NodeName:           "node-1",
		ServiceAccountName: "s-runtime",
		Volumes: []corev1.Volume{
			{Name: lullv1.FilesVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref(0)}}},
			{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: ref(1)}},
			}}}},
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
		InitContainers: []corev1.Container{with("init", "init:v1", []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: ref(2)}}})},
		Containers: []corev1.Container{
			with("proxy", "proxy:v1", nil),
			with(lullv1.RuntimeContainerName, "runtime:v1", nil, corev1.EnvVar{Name: "FROM_CM", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: ref(3), Key: "f"}}}),
		},
		EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox",
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: ref(4)}}}}}},
	}
}

// TestStripSpecKeepsWhatReadersRead runs the controller's readers of
// cached pods and StatefulSets on whole objects and on the cache's
// stripped copies, and wants the same answers: a field stripSpec cuts that
// a reader needs would show here as a different decision.
func TestStripSpecKeepsWhatReadersRead(t *testing.T) {
	var cms []corev1.ConfigMap
	for _, c := range []string{"volume", "projected", "init-envfrom", "env-keyref", "ephemeral", "unreferenced"} {
		cms = append(cms, filesConfigMap(c))
	}
	spec := wholePodSpec(cms)
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s-0", UID: "pod-uid",
		Labels: map[string]string{appsv1.ControllerRevisionHashLabelKey: "s-abc"}},
		Spec: spec,
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: lullv1.RuntimeContainerName, RestartCount: 3}}}}
	sts := appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", Generation: 2},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), ServiceName: "s",
			Selector:             &metav1.LabelSelector{MatchLabels: map[string]string{lullv1.LabelSession: "s"}},
			UpdateStrategy:       appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "work"}, Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("fast")}}},
			Template:             corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{lullv1.LabelSession: "s"}}, Spec: spec}},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 2, UpdateRevision: "s-abc", Replicas: 1}}

	strippedPod, strippedSts := pod.DeepCopy(), sts.DeepCopy()
	stripSpec(strippedPod)
	stripSpec(strippedSts)
	if equality.Semantic.DeepEqual(strippedPod.Spec, pod.Spec) || equality.Semantic.DeepEqual(strippedSts.Spec, sts.Spec) {
		t.Fatal("stripSpec kept every field: the test proves nothing")
	}

	// The files sweeper, once with the StatefulSet as the only referrer
	// and once with the pod (a terminating pod of an older revision).
	for _, o := range []struct {
		name       string
		whole, cut filesweep.Observed
	}{
		{"StatefulSet", filesweep.Observed{StatefulSets: []appsv1.StatefulSet{sts}}, filesweep.Observed{StatefulSets: []appsv1.StatefulSet{*strippedSts}}},
		{"pod", filesweep.Observed{Pods: []corev1.Pod{pod}}, filesweep.Observed{Pods: []corev1.Pod{*strippedPod}}},
	} {
		now := time.Unix(1000, 0)
		seen := map[types.UID]filesweep.Version{}
		for _, cm := range cms {
			seen[cm.UID] = filesweep.Version{ResourceVersion: cm.ResourceVersion, Since: now.Add(-time.Hour)}
		}
		for _, obs := range []*filesweep.Observed{&o.whole, &o.cut} {
			obs.ConfigMaps, obs.UnchangedSince, obs.Now, obs.Grace = cms, seen, now, time.Minute
		}
		want, got := filesweep.Decide(o.whole), filesweep.Decide(o.cut)
		for i := range want.Verdicts {
			w, g := want.Verdicts[i], got.Verdicts[i]
			if w.Delete != g.Delete || w.Reason != g.Reason {
				t.Errorf("%s referrer, ConfigMap %d: stripped gives delete=%v %s, whole delete=%v %s", o.name, i, g.Delete, g.Reason, w.Delete, w.Reason)
			}
		}
		if deletes := len(want.Deletes()); deletes != 1 {
			t.Errorf("%s referrer: %d deletes on whole objects, want only the unreferenced ConfigMap's", o.name, deletes)
		}
	}

	// The catalog gate reads the runtime container's image.
	cat := catalogtest.Catalog()
	tmpl := &lullv1.SessionTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: catalogtest.NamespaceA, Name: "rt"},
		Spec: lullv1.SessionTemplateSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: lullv1.RuntimeContainerName, Image: "registry.example.com/agent-runtime:v3"}}}}}}
	if w, g := session.GateImage(cat, tmpl, &sts, 1), session.GateImage(cat, tmpl, strippedSts, 1); w != g {
		t.Errorf("catalog gate: stripped %+v, whole %+v", g, w)
	}

	// What rollout.Decide and the failure judgement read of a pod, and the
	// session reconciler of a StatefulSet.
	if strippedPod.Spec.NodeName != pod.Spec.NodeName || !equality.Semantic.DeepEqual(strippedPod.Status, pod.Status) || !equality.Semantic.DeepEqual(strippedPod.ObjectMeta, pod.ObjectMeta) {
		t.Errorf("pod: node, status or metadata changed: %+v", strippedPod)
	}
	if *strippedSts.Spec.Replicas != 1 || strippedSts.Spec.VolumeClaimTemplates[0].Name != "work" || !equality.Semantic.DeepEqual(strippedSts.Status, sts.Status) ||
		!equality.Semantic.DeepEqual(strippedSts.Spec.Template.ObjectMeta, sts.Spec.Template.ObjectMeta) {
		t.Errorf("StatefulSet: replicas, claim names, status or template metadata changed: %+v", strippedSts)
	}
}

func TestStripSpecOfIdentityObjects(t *testing.T) {
	role := &rbacv1.Role{Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}}}}
	binding := &rbacv1.RoleBinding{Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "s"}}, RoleRef: rbacv1.RoleRef{Kind: "Role", Name: "s"}}
	sa := &corev1.ServiceAccount{Secrets: []corev1.ObjectReference{{Name: "t"}}}
	for _, o := range []any{role, binding, sa} {
		stripSpec(o)
	}
	// Rules and subjects stay: the Session reconciler compares them with
	// what it renders (a widened Role is undone at once).
	if len(role.Rules) != 1 || len(binding.Subjects) != 1 || sa.Secrets != nil {
		t.Errorf("after stripSpec: rules %v, subjects %v, secrets %v; want the rules and subjects kept, the secrets cut", role.Rules, binding.Subjects, sa.Secrets)
	}
	if binding.RoleRef.Name != "s" {
		t.Errorf("roleRef cut: %+v", binding.RoleRef)
	}
}

// TestStripSpecIsIdempotent: client-go may hand the transform an object it
// has already transformed (an informer's Replace of objects already in its
// store; client-go's TransformFunc asks for idempotence), so stripping a
// stripped object must change nothing.
func TestStripSpecIsIdempotent(t *testing.T) {
	var cms []corev1.ConfigMap
	for _, c := range []string{"a", "b", "c", "d", "e"} {
		cms = append(cms, filesConfigMap(c))
	}
	spec := wholePodSpec(cms)
	objs := []any{
		&corev1.Pod{Spec: spec},
		&appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), Template: corev1.PodTemplateSpec{Spec: spec},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "work"}, Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("fast")}}}}},
		&rbacv1.Role{Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}}}},
		&rbacv1.RoleBinding{Subjects: []rbacv1.Subject{{Name: "s"}}, RoleRef: rbacv1.RoleRef{Name: "s"}},
		&corev1.ServiceAccount{Secrets: []corev1.ObjectReference{{Name: "t"}}},
	}
	for _, o := range objs {
		if _, err := stripForCache(o); err != nil {
			t.Fatal(err)
		}
		once := o.(interface{ DeepCopyObject() runtime.Object }).DeepCopyObject()
		if _, err := stripForCache(o); err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(once, o) {
			t.Errorf("%T stripped twice differs from stripped once:\n once:  %+v\n twice: %+v", o, once, o)
		}
	}
}

// A cached Node keeps what rollout.NodeLost reads (its Ready condition's
// status, reason and transition time) and rollout.NodeDisruption reads
// (cordon, taints), and drops its heartbeats and other conditions.
func TestStripSpecOfANodeKeepsItsReadiness(t *testing.T) {
	since := metav1.NewTime(time.Unix(1000, 0))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: corev1.NodeSpec{Unschedulable: true, PodCIDR: "10.0.0.0/24"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
			{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status.",
				LastHeartbeatTime: metav1.NewTime(time.Unix(2000, 0)), LastTransitionTime: since}}}}
	whole := node.DeepCopy()
	stripSpec(node)
	pod := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "n"}}
	wl, wok := rollout.NodeLost(whole, pod, false)
	gl, gok := rollout.NodeLost(node, pod, false)
	if wok != gok || wl != gl {
		t.Errorf("NodeLost: stripped %+v %v, whole %+v %v", gl, gok, wl, wok)
	}
	if w, _ := rollout.NodeDisruption(whole, nil); w != func() string { g, _ := rollout.NodeDisruption(node, nil); return g }() {
		t.Error("NodeDisruption differs on the stripped node")
	}
	if len(node.Status.Conditions) != 1 || !node.Status.Conditions[0].LastHeartbeatTime.IsZero() || node.Spec.PodCIDR != "" {
		t.Errorf("stripped node keeps %+v", node)
	}
}

// The cached pod keeps the claims it mounts: the session reconciler reads
// them to tell whether a claim's volume holds the pod on its drained node
// (rollout.PinnedTo); other volume sources are cut.
func TestStripSpecKeepsThePodsClaims(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{
		{Name: "workspace", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "workspace-s-0"}}},
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}}}
	stripSpec(pod)
	if len(pod.Spec.Volumes) != 1 || pod.Spec.Volumes[0].PersistentVolumeClaim == nil || pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "workspace-s-0" {
		t.Fatalf("stripped volumes %+v; want only the claim workspace-s-0", pod.Spec.Volumes)
	}
}
