package filesweep

import (
	"testing"
	"time"

	"lull.dev/lull/internal/render"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

const grace = time.Minute

// template returns a template of the files content holds (config.yaml).
func template(name, content string) lullv1.SessionTemplate {
	return lullv1.SessionTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: lullv1.SessionTemplateSpec{Files: &lullv1.Files{MountPath: "/etc/runtime",
			Items: []lullv1.FileItem{{Name: "config.yaml", Content: ptr.To(content)}, {Name: "key", BinaryContent: []byte{0xff, 0}}}}},
	}
}

// filesOf is the ConfigMap lull writes for the template, with a UID and
// resourceVersion as the API server gives them.
func filesOf(t lullv1.SessionTemplate) corev1.ConfigMap {
	cm, err := render.FilesConfigMap(&t)
	if err != nil {
		panic(err)
	}
	cm.UID = types.UID("uid-" + cm.Name)
	cm.ResourceVersion = "7"
	return *cm
}

// settled says every ConfigMap has been at its version for longer than
// grace.
func settled(cms ...corev1.ConfigMap) map[types.UID]Version {
	out := map[types.UID]Version{}
	for _, cm := range cms {
		out[cm.UID] = Version{ResourceVersion: cm.ResourceVersion, Since: t0.Add(-2 * grace)}
	}
	return out
}

func withVolume(v corev1.Volume) corev1.PodSpec {
	return corev1.PodSpec{Volumes: []corev1.Volume{v}}
}

func cmVolume(name string) corev1.Volume {
	return corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}}
}

func projected(name string) corev1.Volume {
	return corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
		{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: name}}},
	}}}}
}

func statefulSet(spec corev1.PodSpec) appsv1.StatefulSet {
	return appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "foreign", Generation: 3},
		Spec:   appsv1.StatefulSetSpec{Template: corev1.PodTemplateSpec{Spec: spec}},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 3}}
}

func pod(spec corev1.PodSpec, terminating bool) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: spec}
	if terminating {
		p.DeletionTimestamp = &metav1.Time{Time: t0.Add(-time.Hour)}
		p.Finalizers = []string{"example.com/hold"}
	}
	return p
}

// TestDecide covers each reason to keep a ConfigMap and the one case it is
// deleted. The template "rt" is at content "v2"; the candidate is its
// files at "v1".
func TestDecide(t *testing.T) {
	cur := template("rt", "v2")
	old := filesOf(template("rt", "v1"))
	for _, tc := range []struct {
		name string
		edit func(o *Observed)
		want Reason // "" means deleted
	}{
		{"nothing needs it: deleted", func(o *Observed) {}, ""},
		{"the current files of its template", func(o *Observed) { o.Templates = []lullv1.SessionTemplate{template("rt", "v1")} }, Current},
		{"the current files of another template of the same name's content", func(o *Observed) {
			// A template renamed back: current is judged by name, and
			// the name holds the template's name.
			o.Templates = append(o.Templates, template("other", "v1"))
		}, ""},
		{"a StatefulSet's configMap volume", func(o *Observed) {
			o.StatefulSets = []appsv1.StatefulSet{statefulSet(withVolume(cmVolume(old.Name)))}
		}, Referenced},
		{"a StatefulSet's projected source", func(o *Observed) {
			o.StatefulSets = []appsv1.StatefulSet{statefulSet(withVolume(projected(old.Name)))}
		}, Referenced},
		{"a StatefulSet's container envFrom", func(o *Observed) {
			o.StatefulSets = []appsv1.StatefulSet{statefulSet(corev1.PodSpec{InitContainers: []corev1.Container{{Name: "i",
				EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: old.Name}}}}}}})}
		}, Referenced},
		{"a StatefulSet whose controller lags its spec", func(o *Observed) {
			sts := statefulSet(withVolume(cmVolume("something-else")))
			sts.Status.ObservedGeneration = 2
			o.StatefulSets = []appsv1.StatefulSet{sts}
		}, Referenced},
		{"a pod's configMap volume", func(o *Observed) {
			o.Pods = []corev1.Pod{pod(withVolume(cmVolume(old.Name)), false)}
		}, Mounted},
		{"a terminating pod's configMap volume", func(o *Observed) {
			o.Pods = []corev1.Pod{pod(withVolume(cmVolume(old.Name)), true)}
		}, Mounted},
		{"a terminating pod's projected source", func(o *Observed) {
			o.Pods = []corev1.Pod{pod(withVolume(projected(old.Name)), true)}
		}, Mounted},
		{"a pod's env configMapKeyRef", func(o *Observed) {
			o.Pods = []corev1.Pod{pod(corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Env: []corev1.EnvVar{{Name: "X",
				ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: old.Name}, Key: "k"}}}}}}}, false)}
		}, Mounted},
		{"a pod's volume of another ConfigMap", func(o *Observed) {
			o.Pods = []corev1.Pod{pod(withVolume(cmVolume("rt-files-000000000000")), true)}
		}, ""},
		{"never observed by this process (just started)", func(o *Observed) { o.UnchangedSince = nil }, Settling},
		{"unchanged for less than grace", func(o *Observed) {
			o.UnchangedSince[old.UID] = Version{ResourceVersion: old.ResourceVersion, Since: t0.Add(-grace + time.Second)}
		}, Settling},
		{"unchanged for exactly grace", func(o *Observed) {
			o.UnchangedSince[old.UID] = Version{ResourceVersion: old.ResourceVersion, Since: t0.Add(-grace)}
		}, ""},
		{"observed at another resourceVersion (marked referenced since)", func(o *Observed) {
			o.UnchangedSince[old.UID] = Version{ResourceVersion: "6", Since: t0.Add(-time.Hour)}
		}, Settling},
		{"lull's labels, content edited (not the labelled hash)", func(o *Observed) {
			o.ConfigMaps[0].Data["config.yaml"] = "forged"
		}, NotOurs},
		{"lull's labels, data moved to binaryData", func(o *Observed) {
			cm := &o.ConfigMaps[0]
			cm.BinaryData["config.yaml"] = []byte(cm.Data["config.yaml"])
			delete(cm.Data, "config.yaml")
		}, NotOurs},
		{"lull's labels, another name", func(o *Observed) { o.ConfigMaps[0].Name = "mine" }, NotOurs},
		{"lull's labels, another template's name", func(o *Observed) { o.ConfigMaps[0].Labels[lullv1.LabelTemplate] = "other" }, NotOurs},
		{"no lull.dev/template label", func(o *Observed) { delete(o.ConfigMaps[0].Labels, lullv1.LabelTemplate) }, NotOurs},
		{"no lull.dev/files label", func(o *Observed) { delete(o.ConfigMaps[0].Labels, lullv1.LabelFiles) }, NotOurs},
		{"a foreign ConfigMap that also mounts nowhere", func(o *Observed) {
			o.ConfigMaps[0] = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app-config", UID: "u", ResourceVersion: "1",
				Labels: map[string]string{lullv1.LabelFiles: "abc"}}}
			o.UnchangedSince = settled(o.ConfigMaps[0])
		}, NotOurs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := *old.DeepCopy()
			o := Observed{ConfigMaps: []corev1.ConfigMap{cm}, Templates: []lullv1.SessionTemplate{cur},
				UnchangedSince: settled(cm), Now: t0, Grace: grace}
			tc.edit(&o)
			p := Decide(o)
			if len(p.Verdicts) != 1 {
				t.Fatalf("%d verdicts, want 1", len(p.Verdicts))
			}
			v := p.Verdicts[0]
			switch {
			case tc.want == "" && !v.Delete:
				t.Errorf("kept (%s), want deleted", v.Reason)
			case tc.want != "" && v.Delete:
				t.Errorf("deleted, want kept (%s)", tc.want)
			case tc.want != "" && v.Reason != tc.want:
				t.Errorf("kept for %s, want %s", v.Reason, tc.want)
			}
			if v.ConfigMap.ResourceVersion != o.ConfigMaps[0].ResourceVersion || v.ConfigMap.UID != o.ConfigMaps[0].UID {
				t.Errorf("the verdict names %s@%s, not the version judged", v.ConfigMap.UID, v.ConfigMap.ResourceVersion)
			}
		})
	}
}

// TestDecideNextCheck: a pass asks to be run again when the first settling
// ConfigMap stops settling; a ConfigMap first seen now settles for grace.
func TestDecideNextCheck(t *testing.T) {
	a, b := filesOf(template("a", "1")), filesOf(template("b", "1"))
	o := Observed{ConfigMaps: []corev1.ConfigMap{a, b}, Now: t0, Grace: grace,
		UnchangedSince: map[types.UID]Version{a.UID: {ResourceVersion: a.ResourceVersion, Since: t0.Add(-grace + 10*time.Second)}}}
	p := Decide(o)
	if got, want := p.NextCheck, t0.Add(10*time.Second); !got.Equal(want) {
		t.Errorf("NextCheck %s, want %s", got, want)
	}
	if k := p.Kept(); k[Settling] != 2 || len(p.Deletes()) != 0 {
		t.Errorf("kept %v, deletes %d; want 2 settling", k, len(p.Deletes()))
	}
	delete(o.UnchangedSince, a.UID)
	if got, want := Decide(o).NextCheck, t0.Add(grace); !got.Equal(want) {
		t.Errorf("never seen: NextCheck %s, want %s", got, want)
	}
	o.UnchangedSince = settled(a, b)
	if p := Decide(o); !p.NextCheck.IsZero() || len(p.Deletes()) != 2 {
		t.Errorf("all settled: NextCheck %s, %d deletes; want none and 2", p.NextCheck, len(p.Deletes()))
	}
}

// TestDecideManyCandidates: each candidate is judged on its own, and Kept
// counts every reason.
func TestDecideManyCandidates(t *testing.T) {
	v1, v2, v3 := filesOf(template("rt", "v1")), filesOf(template("rt", "v2")), filesOf(template("rt", "v3"))
	foreign := *v1.DeepCopy()
	foreign.Name, foreign.UID = "rt-files-aaaaaaaaaaaa", "foreign"
	o := Observed{ConfigMaps: []corev1.ConfigMap{v1, v2, v3, foreign}, Templates: []lullv1.SessionTemplate{template("rt", "v3")},
		Pods: []corev1.Pod{pod(withVolume(cmVolume(v2.Name)), true)}, UnchangedSince: settled(v1, v2, v3, foreign), Now: t0, Grace: grace}
	p := Decide(o)
	if d := p.Deletes(); len(d) != 1 || d[0].Name != v1.Name {
		t.Fatalf("deletes %v, want only %s", d, v1.Name)
	}
	want := map[Reason]int{Current: 1, Mounted: 1, NotOurs: 1, Referenced: 0, Settling: 0}
	for r, n := range want {
		if p.Kept()[r] != n {
			t.Errorf("kept %s: %d, want %d", r, p.Kept()[r], n)
		}
	}
}

// A judgement on the API server that kept a ConfigMap stands for ttl at
// the resourceVersion it judged, and only ever keeps more.
func TestStanding(t *testing.T) {
	a, b := filesOf(template("a", "1")), filesOf(template("b", "2"))
	p := Plan{Verdicts: []Verdict{{ConfigMap: &a, Delete: true}, {ConfigMap: &b, Delete: true}}}
	for _, tc := range []struct {
		what  string
		live  LiveVerdict
		at    time.Time
		keeps bool
	}{
		{"kept live a moment ago at this version", LiveVerdict{ResourceVersion: "7", Reason: Mounted, At: t0}, t0.Add(time.Second), true},
		{"kept live an interval ago", LiveVerdict{ResourceVersion: "7", Reason: Mounted, At: t0}, t0.Add(time.Minute), false},
		{"kept live at another version", LiveVerdict{ResourceVersion: "6", Reason: Mounted, At: t0}, t0.Add(time.Second), false},
	} {
		got := Standing(p, map[types.UID]LiveVerdict{a.UID: tc.live}, tc.at, time.Minute)
		if kept := !got.Verdicts[0].Delete && got.Verdicts[0].Reason == Mounted; kept != tc.keeps {
			t.Errorf("%s: verdict %+v, want kept %v", tc.what, got.Verdicts[0], tc.keeps)
		}
		if !got.Verdicts[1].Delete {
			t.Errorf("%s: a ConfigMap no live judgement kept is kept", tc.what)
		}
		if !p.Verdicts[0].Delete {
			t.Fatal("Standing changed the plan it was given")
		}
	}
	kept := Plan{Verdicts: []Verdict{{ConfigMap: &a, Reason: Current}}}
	if got := Standing(kept, map[types.UID]LiveVerdict{a.UID: {ResourceVersion: "7", Reason: Mounted, At: t0}}, t0, time.Minute); got.Verdicts[0].Reason != Current {
		t.Errorf("a kept verdict was rewritten: %+v", got.Verdicts[0])
	}
}
