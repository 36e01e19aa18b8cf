package render

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// FilesConfigMap renders the immutable ConfigMap that carries a template's
// spec.files, named by their content: <template>-files-<FilesHash>. It is
// shared by every session of the template whose pod was rendered from the
// same files, and never edited: new content is a new ConfigMap, so a
// running pod keeps the files it booted with (the telo k8s-runner's
// content-addressed config). Text items go into data, binary ones into
// binaryData. It has no owner: a files ConfigMap outlives its template for
// the pods still mounting it, and is deleted by the sweeper once nothing
// references it (docs/runtime-files.md).
//
// It returns nil, nil for a template without files, and an error naming
// spec.files when the files total more than lullv1.FilesMaxBytes or an item
// has not exactly one of content and binaryContent (the CRD refuses both;
// this guards a template the CRD did not check).
func FilesConfigMap(t *lullv1.SessionTemplate) (*corev1.ConfigMap, error) {
	f := t.Spec.Files
	if f == nil {
		return nil, nil
	}
	if errs := filesErrors(f); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      FilesConfigMapName(t),
			Namespace: t.Namespace,
			Labels: map[string]string{
				lullv1.LabelTemplate: t.Name,
				lullv1.LabelFiles:    FilesHash(f),
			},
		},
		Immutable: ptr.To(true),
	}
	for _, it := range f.Items {
		if it.Content != nil {
			if cm.Data == nil {
				cm.Data = map[string]string{}
			}
			cm.Data[it.Name] = *it.Content
			continue
		}
		if cm.BinaryData == nil {
			cm.BinaryData = map[string][]byte{}
		}
		cm.BinaryData[it.Name] = slices.Clone(it.BinaryContent)
	}
	return cm, nil
}

// FilesConfigMapName is the name of the ConfigMap of a template's files:
// <template>-files-<FilesHash>, at most 63+7+12 = 82 characters (a template
// name is at most 63; a ConfigMap's may be 253). Empty without files.
func FilesConfigMapName(t *lullv1.SessionTemplate) string {
	if t.Spec.Files == nil {
		return ""
	}
	return t.Name + "-files-" + FilesHash(t.Spec.Files)
}

// FilesHash is the content address of a set of files: the first 12 hex
// characters of the SHA-256 of their canonical encoding. Items are sorted
// by name; each is encoded as its name's length, the name, a kind byte
// (text or binary), its content's length and the content, lengths as 8-byte
// big-endian integers. The encoding is injective, so two different sets
// (one file "ab" = "c" against "a" = "bc", say) never share an input, and
// the order of spec.files.items does not matter. The mount path is not part
// of it: it is in the pod template, not the ConfigMap.
func FilesHash(f *lullv1.Files) string {
	entries := make([]fileEntry, 0, len(f.Items))
	for _, it := range f.Items {
		if it.Content != nil {
			entries = append(entries, fileEntry{name: it.Name, content: []byte(*it.Content)})
		} else {
			entries = append(entries, fileEntry{name: it.Name, binary: true, content: it.BinaryContent})
		}
	}
	return hashFiles(entries)
}

// ConfigMapFilesHash is FilesHash recomputed from a ConfigMap's content:
// data as text items, binaryData as binary ones. For the ConfigMap that
// FilesConfigMap renders from a template, it equals FilesHash of the
// template's files, so a ConfigMap whose lull.dev/files label is not the
// hash of what it holds is not one lull wrote (the sweeper never deletes
// such a ConfigMap).
func ConfigMapFilesHash(cm *corev1.ConfigMap) string {
	entries := make([]fileEntry, 0, len(cm.Data)+len(cm.BinaryData))
	for name, content := range cm.Data {
		entries = append(entries, fileEntry{name: name, content: []byte(content)})
	}
	for name, content := range cm.BinaryData {
		entries = append(entries, fileEntry{name: name, binary: true, content: content})
	}
	return hashFiles(entries)
}

// fileEntry is one file of the canonical encoding FilesHash describes.
type fileEntry struct {
	name    string
	binary  bool
	content []byte
}

func hashFiles(entries []fileEntry) string {
	slices.SortFunc(entries, func(a, b fileEntry) int { return strings.Compare(a.name, b.name) })
	h := sha256.New()
	var n [8]byte
	put := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	for _, e := range entries {
		put([]byte(e.name))
		if e.binary {
			h.Write([]byte{'b'})
		} else {
			h.Write([]byte{'t'})
		}
		put(e.content)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// filesErrors is what the controller checks of spec.files itself: the
// CRD's rules that a template may not have passed (one stored before this
// version of the CRD), and the exact total in bytes, which the CRD can only
// approximate (it counts text in characters).
func filesErrors(f *lullv1.Files) field.ErrorList {
	var errs field.ErrorList
	path := field.NewPath("spec", "files")
	total := 0
	seen := map[string]bool{}
	for i, it := range f.Items {
		ip := path.Child("items").Index(i)
		if seen[it.Name] {
			errs = append(errs, field.Duplicate(ip.Child("name"), it.Name))
		}
		seen[it.Name] = true
		switch {
		case (it.Content != nil) == (it.BinaryContent != nil):
			errs = append(errs, field.Invalid(ip, it.Name, "give exactly one of content (text) or binaryContent (base64)"))
		case it.Content != nil:
			if !utf8.ValidString(*it.Content) {
				errs = append(errs, field.Invalid(ip.Child("content"), it.Name, "content must be UTF-8; use binaryContent for bytes"))
			}
			total += len(*it.Content)
		default:
			total += len(it.BinaryContent)
		}
	}
	if total > lullv1.FilesMaxBytes {
		errs = append(errs, field.TooLong(path.Child("items"), fmt.Sprintf("%d bytes", total), lullv1.FilesMaxBytes))
	}
	return errs
}

// filesVolume and filesMount deliver the files ConfigMap into the runtime
// container as a directory (never subPath, which the kubelet does not
// update and which would hide that the directory is lull's).
func filesVolume(t *lullv1.SessionTemplate) corev1.Volume {
	return corev1.Volume{Name: lullv1.FilesVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: FilesConfigMapName(t)},
	}}}
}

func filesMount(t *lullv1.SessionTemplate) corev1.VolumeMount {
	return corev1.VolumeMount{Name: lullv1.FilesVolume, MountPath: t.Spec.Files.MountPath, ReadOnly: true}
}

// filesMountErrors refuses a runtime container that mounts a volume of its
// own at spec.files.mountPath: the pod would have two volumes at one path.
func filesMountErrors(t *lullv1.SessionTemplate) field.ErrorList {
	var errs field.ErrorList
	mp := path.Clean(t.Spec.Files.MountPath)
	for i, c := range t.Spec.Template.Spec.Containers {
		if c.Name != lullv1.RuntimeContainerName {
			continue
		}
		for j, m := range c.VolumeMounts {
			if path.Clean(m.MountPath) == mp {
				errs = append(errs, field.Invalid(field.NewPath("spec", "template", "spec", "containers").Index(i).Child("volumeMounts").Index(j).Child("mountPath"), m.MountPath,
					"spec.files is mounted there; mount this volume elsewhere or move spec.files.mountPath"))
			}
		}
	}
	return errs
}
