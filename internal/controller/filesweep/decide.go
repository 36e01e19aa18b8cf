// Package filesweep holds the files sweeper: a housekeeping controller that
// deletes the content-addressed ConfigMaps of templates' files
// (spec.files) that nothing needs any more, and never one a pod mounts, a
// StatefulSet references, or lull did not write. Decide is the judgement,
// a pure function of what the sweeper observed; Reconciler does the I/O.
// The rules are numbered in docs/runtime-files.md, "Sweeper".
package filesweep

import (
	"slices"
	"time"

	"lull.dev/lull/internal/render"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// Reason is why the sweeper keeps a ConfigMap; the value of the reason
// label of lull_files_configmaps_kept.
type Reason string

// The reasons to keep a ConfigMap, in the order Decide tries them: a
// ConfigMap kept for several reasons is reported under the first.
const (
	// NotOurs: lull did not write it. Its labels are not both there, its
	// name is not <lull.dev/template>-files-<lull.dev/files>, or its
	// content does not hash to its lull.dev/files label.
	NotOurs Reason = "notOurs"
	// Current: it holds the current spec.files of a SessionTemplate of
	// its namespace.
	Current Reason = "current"
	// Referenced: a StatefulSet of its namespace (any, not only lull's)
	// names it in its pod template; or a StatefulSet's controller has not
	// yet observed its latest spec (status.observedGeneration behind
	// metadata.generation), and may still create a pod from an earlier
	// spec that named it.
	Referenced Reason = "referenced"
	// Mounted: a pod of its namespace names it, terminating pods
	// included.
	Mounted Reason = "mounted"
	// Settling: its resourceVersion has not been unchanged for Grace as
	// this process observed it: it was just created or just marked
	// referenced (lull.dev/referenced-at), or the sweeper started less
	// than Grace ago.
	Settling Reason = "settling"
)

// Reasons lists every Reason, for reporting zeros.
var Reasons = []Reason{NotOurs, Current, Referenced, Mounted, Settling}

// Observed is what one pass of the sweeper saw in one namespace.
type Observed struct {
	// ConfigMaps are the candidates: the ConfigMaps labelled
	// lull.dev/files.
	ConfigMaps []corev1.ConfigMap
	// Templates, StatefulSets and Pods are every one of the namespace
	// (not only lull's), pods terminating included.
	Templates    []lullv1.SessionTemplate
	StatefulSets []appsv1.StatefulSet
	Pods         []corev1.Pod
	// UnchangedSince is, by ConfigMap UID, since when this process has
	// seen the ConfigMap at the resourceVersion it has in ConfigMaps. A
	// ConfigMap missing here, or seen at another resourceVersion, is
	// Settling.
	UnchangedSince map[types.UID]Version
	// Now is the time of the pass; Grace how long a resourceVersion must
	// have been unchanged before its ConfigMap may be deleted.
	Now   time.Time
	Grace time.Duration
}

// Version is a resourceVersion and since when it has been observed.
type Version struct {
	ResourceVersion string
	Since           time.Time
}

// Verdict is the judgement of one ConfigMap.
type Verdict struct {
	// ConfigMap is the candidate as observed: a delete must carry its UID
	// and resourceVersion as preconditions.
	ConfigMap *corev1.ConfigMap
	// Delete is true when nothing needs it; Reason says why it is kept
	// otherwise.
	Delete bool
	Reason Reason
}

// Plan is the judgement of a pass.
type Plan struct {
	// Verdicts holds one entry per candidate, in the order given.
	Verdicts []Verdict
	// NextCheck, when not zero, is the earliest time a Settling ConfigMap
	// stops settling: a pass then may judge it again.
	NextCheck time.Time
}

// Deletes returns the ConfigMaps the plan deletes.
func (p Plan) Deletes() []*corev1.ConfigMap {
	var out []*corev1.ConfigMap
	for _, v := range p.Verdicts {
		if v.Delete {
			out = append(out, v.ConfigMap)
		}
	}
	return out
}

// Kept counts the kept ConfigMaps by reason; every Reason is present.
func (p Plan) Kept() map[Reason]int {
	out := make(map[Reason]int, len(Reasons))
	for _, r := range Reasons {
		out[r] = 0
	}
	for _, v := range p.Verdicts {
		if !v.Delete {
			out[v.Reason]++
		}
	}
	return out
}

// Decide judges each candidate ConfigMap of o: kept, with the first
// Reason that applies, or deleted when none does. It keeps whatever it
// cannot prove unneeded: a ConfigMap lull did not write, the current files
// of any template, one any StatefulSet or pod names (configMap volumes and
// projected sources, envFrom and env references of every container kind),
// every one while a StatefulSet's controller lags its spec, and one whose
// resourceVersion has not been unchanged for Grace.
func Decide(o Observed) Plan {
	current := map[string]bool{}
	for i := range o.Templates {
		if n := render.FilesConfigMapName(&o.Templates[i]); n != "" {
			current[n] = true
		}
	}
	referenced := map[string]bool{}
	syncing := false
	for i := range o.StatefulSets {
		sts := &o.StatefulSets[i]
		podSpecNames(&sts.Spec.Template.Spec, referenced)
		if sts.Status.ObservedGeneration < sts.Generation {
			syncing = true
		}
	}
	mounted := map[string]bool{}
	for i := range o.Pods {
		podSpecNames(&o.Pods[i].Spec, mounted)
	}

	var p Plan
	for i := range o.ConfigMaps {
		cm := &o.ConfigMaps[i]
		v := Verdict{ConfigMap: cm}
		switch {
		case !ours(cm):
			v.Reason = NotOurs
		case current[cm.Name]:
			v.Reason = Current
		case referenced[cm.Name] || syncing:
			v.Reason = Referenced
		case mounted[cm.Name]:
			v.Reason = Mounted
		default:
			seen, ok := o.UnchangedSince[cm.UID]
			if until := seen.Since.Add(o.Grace); !ok || seen.ResourceVersion != cm.ResourceVersion || o.Now.Before(until) {
				v.Reason = Settling
				if !ok || seen.ResourceVersion != cm.ResourceVersion {
					until = o.Now.Add(o.Grace)
				}
				if p.NextCheck.IsZero() || until.Before(p.NextCheck) {
					p.NextCheck = until
				}
			} else {
				v.Delete = true
			}
		}
		p.Verdicts = append(p.Verdicts, v)
	}
	return p
}

// LiveVerdict is a judgement on the API server that kept a ConfigMap: at
// which resourceVersion, why, and when.
type LiveVerdict struct {
	ResourceVersion string
	Reason          Reason
	At              time.Time
}

// Standing returns p, a judgement on the cache, with each Delete verdict
// that a judgement on the API server kept (live, by ConfigMap UID) at the
// same resourceVersion less than ttl before now turned into that
// judgement's Keep. The cache holds only lull's StatefulSets and pods, so
// a ConfigMap that only another's object names is found deletable by
// every cache judgement; without the standing verdict every pass would
// list the whole namespace from the API server again. It only ever keeps
// more than p: a foreign reference that goes is seen by the next
// judgement on the API server, at most ttl later.
func Standing(p Plan, live map[types.UID]LiveVerdict, now time.Time, ttl time.Duration) Plan {
	out := Plan{NextCheck: p.NextCheck, Verdicts: slices.Clone(p.Verdicts)}
	for i, v := range out.Verdicts {
		lv, ok := live[v.ConfigMap.UID]
		if v.Delete && ok && lv.ResourceVersion == v.ConfigMap.ResourceVersion && now.Sub(lv.At) < ttl {
			out.Verdicts[i] = Verdict{ConfigMap: v.ConfigMap, Reason: lv.Reason}
		}
	}
	return out
}

// ours reports whether lull wrote cm as a template's files: both labels,
// the name they make, and content that hashes to the lull.dev/files label.
// A ConfigMap that merely copies lull's labels is not lull's.
func ours(cm *corev1.ConfigMap) bool {
	tpl, okT := cm.Labels[lullv1.LabelTemplate]
	hash, okF := cm.Labels[lullv1.LabelFiles]
	return okT && okF && tpl != "" && hash != "" &&
		cm.Name == tpl+"-files-"+hash &&
		render.ConfigMapFilesHash(cm) == hash
}

// podSpecNames adds to names every ConfigMap spec names: configMap volumes,
// projected volumes' configMap sources, and the envFrom and env
// (configMapKeyRef) of its containers, init containers and ephemeral
// containers.
func podSpecNames(spec *corev1.PodSpec, names map[string]bool) {
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil {
			names[v.ConfigMap.Name] = true
		}
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil {
					names[s.ConfigMap.Name] = true
				}
			}
		}
	}
	env := func(from []corev1.EnvFromSource, vars []corev1.EnvVar) {
		for _, f := range from {
			if f.ConfigMapRef != nil {
				names[f.ConfigMapRef.Name] = true
			}
		}
		for _, e := range vars {
			if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
				names[e.ValueFrom.ConfigMapKeyRef.Name] = true
			}
		}
	}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		env(c.EnvFrom, c.Env)
	}
	for _, c := range spec.EphemeralContainers {
		env(c.EnvFrom, c.Env)
	}
}
