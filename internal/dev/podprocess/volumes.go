package podprocess

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// EnvDevMounts names the variable that lists, one "mountPath=hostDir" per
// line, the mount paths of a process's container that the runner mapped to
// host directories, in the order of the container's volumeMounts; empty
// when it mounts no mapped volume. A runtime under `lull dev` reads it to
// map paths that are not in its env or args.
const EnvDevMounts = "LULL_DEV_MOUNTS"

// mount is one volume mount of a container mapped to the host.
type mount struct {
	path string // the mount path in the container, cleaned
	host string // the host directory standing in for it
}

// volumeDir is the host directory that holds a pod's emptyDir volumes:
// volumes/ and 16 hex characters of the SHA-256 of the pod's UID, not the
// UID itself, so the agent's socket path in it stays under the 107 bytes a
// unix socket path may have even under a long state directory.
func (r *Runner) volumeDir(uid types.UID) string {
	sum := sha256.Sum256([]byte(uid))
	return filepath.Join(r.opts.Dir, "volumes", hex.EncodeToString(sum[:8]))
}

// podVolumes returns the host directory of each of pod's volumes that has
// one, by volume name: an emptyDir gets a directory under volumeDir,
// created here; a configMap a directory under volumeDir holding the
// ConfigMap's keys as files (see writeConfigMap); a persistentVolumeClaim
// gets the hostPath of the PersistentVolume it is bound to. It fails while
// a claim is not bound or a ConfigMap that is not optional is missing.
func (r *Runner) podVolumes(ctx context.Context, pod *corev1.Pod) (map[string]string, error) {
	dirs := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.EmptyDir != nil:
			dir := filepath.Join(r.volumeDir(pod.UID), v.Name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			dirs[v.Name] = dir
		case v.ConfigMap != nil:
			dir := filepath.Join(r.volumeDir(pod.UID), v.Name)
			if err := r.writeConfigMap(ctx, pod.Namespace, v.ConfigMap, dir); err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			dirs[v.Name] = dir
		case v.PersistentVolumeClaim != nil:
			dir, err := r.claimDir(ctx, pod.Namespace, v.PersistentVolumeClaim.ClaimName)
			if err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			dirs[v.Name] = dir
		}
	}
	return dirs, nil
}

// writeConfigMap writes a configMap volume's files into dir, as the
// kubelet projects them: every key of data and binaryData as a file named
// by the key, or with items only those keys, at their paths; mode 0644, or
// the volume's defaultMode or the item's mode. A missing ConfigMap that is
// optional gives an empty directory. Files are written on every start and
// never removed: lull's files ConfigMaps are immutable and named by their
// content, so a pod's never changes.
func (r *Runner) writeConfigMap(ctx context.Context, ns string, src *corev1.ConfigMapVolumeSource, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cm, err := r.client.CoreV1().ConfigMaps(ns).Get(ctx, src.Name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) && src.Optional != nil && *src.Optional {
			return nil
		}
		return fmt.Errorf("configmap %s/%s: %w", ns, src.Name, err)
	}
	files := map[string][]byte{}
	for k, v := range cm.Data {
		files[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		files[k] = v
	}
	mode := os.FileMode(0o644)
	if src.DefaultMode != nil {
		mode = os.FileMode(*src.DefaultMode)
	}
	type file struct {
		key, path string
		mode      os.FileMode
	}
	var out []file
	if len(src.Items) == 0 {
		for k := range files {
			out = append(out, file{k, k, mode})
		}
	}
	for _, it := range src.Items {
		m := mode
		if it.Mode != nil {
			m = os.FileMode(*it.Mode)
		}
		if _, ok := files[it.Key]; !ok {
			if src.Optional != nil && *src.Optional {
				continue
			}
			return fmt.Errorf("configmap %s/%s has no key %s", ns, src.Name, it.Key)
		}
		if !filepath.IsLocal(it.Path) {
			return fmt.Errorf("configmap %s/%s: item path %q must be a relative path inside the volume", ns, src.Name, it.Path)
		}
		out = append(out, file{it.Key, it.Path, m})
	}
	for _, f := range out {
		p := filepath.Join(dir, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, files[f.key], f.mode); err != nil {
			return err
		}
		if err := os.Chmod(p, f.mode); err != nil {
			return err
		}
	}
	return nil
}

// claimDir resolves a claim to the host directory of its volume: claim,
// then spec.volumeName, then the PersistentVolume's spec.hostPath.path.
func (r *Runner) claimDir(ctx context.Context, ns, claim string) (string, error) {
	pvc, err := r.client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("persistentvolumeclaim %s/%s: %w", ns, claim, err)
	}
	if pvc.Spec.VolumeName == "" || pvc.Status.Phase != corev1.ClaimBound {
		return "", fmt.Errorf("persistentvolumeclaim %s/%s is not bound yet (phase %q): the pod's processes start once it is bound to a volume", ns, claim, pvc.Status.Phase)
	}
	pv, err := r.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("persistentvolume %s of claim %s/%s: %w", pvc.Spec.VolumeName, ns, claim, err)
	}
	if pv.Spec.HostPath == nil {
		return "", fmt.Errorf("persistentvolume %s of claim %s/%s is not a hostPath volume: under lull dev a claim's volume must be a host directory", pv.Name, ns, claim)
	}
	return pv.Spec.HostPath.Path, nil
}

// mountsOf maps c's volumeMounts of the volumes in dirs (by volume name) to
// host directories, a subPath (or subPathExpr, expanded with env, the
// container's resolved environment) joined to its volume's directory.
// Mounts of other volumes, and at "/" or a relative path, are left out:
// nothing could be rewritten for them.
func mountsOf(c *corev1.Container, dirs map[string]string, env map[string]string) ([]mount, error) {
	var mounts []mount
	for _, vm := range c.VolumeMounts {
		host, ok := dirs[vm.Name]
		p := path.Clean(vm.MountPath)
		if !ok || !path.IsAbs(p) || p == "/" {
			continue
		}
		sub := vm.SubPath
		if vm.SubPathExpr != "" {
			sub = expandVars(vm.SubPathExpr, env)
		}
		if sub != "" {
			if !filepath.IsLocal(sub) {
				return nil, fmt.Errorf("container %s: mount of volume %s at %s: subPath %q must be a relative path inside the volume", c.Name, vm.Name, vm.MountPath, sub)
			}
			host = filepath.Join(host, sub)
		}
		mounts = append(mounts, mount{path: p, host: host})
	}
	return mounts, nil
}

// expandVars expands s as a kubelet expands env values, command, args and
// subPathExpr: $(NAME) becomes NAME's value in env, a reference to an
// undefined variable is left as written, and $$ is an escaped $.
func expandVars(s string, env map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
			continue
		case '(':
			if end := strings.IndexByte(s[i+2:], ')'); end >= 0 {
				name := s[i+2 : i+2+end]
				if v, ok := env[name]; ok {
					b.WriteString(v)
				} else {
					b.WriteString(s[i : i+3+end])
				}
				i += 2 + end
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// devMounts is the value of EnvDevMounts for mounts.
func devMounts(mounts []mount) string {
	lines := make([]string, len(mounts))
	for i, m := range mounts {
		lines[i] = m.path + "=" + m.host
	}
	return strings.Join(lines, "\n")
}

// rewritePaths returns s with each occurrence of a mount path as a path
// prefix replaced by the mount's host directory. An occurrence counts where
// a path can start — at the start of s, after a character that cannot be
// part of a path (=, :, a comma, a space, a quote…) or after the "://" of a
// URL with an empty host (unix:///run/lull/agent.sock) — and where the path
// goes on into the mount or ends: at the end of s, before '/', or before a
// character that cannot be part of a path. So /workspace is rewritten in
// /workspace, /workspace/src, --dir=/workspace and a:/workspace, not in
// /workspace2, /workspace.old or /srv/workspace. Where mount paths nest,
// the longest wins; what is written in is not rewritten again.
func rewritePaths(s string, mounts []mount) string {
	if len(mounts) == 0 {
		return s
	}
	longestFirst := slices.Clone(mounts)
	slices.SortStableFunc(longestFirst, func(a, b mount) int { return len(b.path) - len(a.path) })
	var b strings.Builder
	for i := 0; i < len(s); {
		if pathStart(s, i) {
			if m, ok := mountAt(s, i, longestFirst); ok {
				b.WriteString(m.host)
				i += len(m.path)
				continue
			}
		}
		b.WriteByte(s[i])
		i++
	}
	return b.String()
}

// pathStart reports whether an absolute path can start at s[i].
func pathStart(s string, i int) bool {
	return i == 0 || !isPathByte(s[i-1]) || strings.HasSuffix(s[:i], "://")
}

// mountAt returns the first of mounts whose path occurs at s[i] and ends
// there as a path component does.
func mountAt(s string, i int, mounts []mount) (mount, bool) {
	for _, m := range mounts {
		if !strings.HasPrefix(s[i:], m.path) {
			continue
		}
		if end := i + len(m.path); end == len(s) || s[end] == '/' || !isPathByte(s[end]) {
			return m, true
		}
	}
	return mount{}, false
}

// isPathByte reports whether b can be part of a path as people write them:
// letters, digits, '/', ".-_~+@%", and any byte of a non-ASCII character.
func isPathByte(b byte) bool {
	return b >= 0x80 || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' ||
		strings.IndexByte("/._-~+@%", b) >= 0
}

// VolumeDir returns the host directory standing in for the emptyDir or
// configMap volume of the given name in the pod with the given UID.
func (r *Runner) VolumeDir(uid types.UID, volume string) string {
	return filepath.Join(r.volumeDir(uid), volume)
}

// AgentSocket returns the host path of the agent sidecar's socket in the
// pod with the given UID: where a local client (a test, `lull dev`) reaches
// the agent's HTTP API, as a container in the pod would at
// lullv1.AgentSocketPath.
func (r *Runner) AgentSocket(uid types.UID) string {
	return filepath.Join(r.volumeDir(uid), lullv1.AgentSocketVolume, filepath.Base(lullv1.AgentSocketPath))
}
