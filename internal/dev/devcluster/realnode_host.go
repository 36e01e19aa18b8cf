package devcluster

import (
	"bufio"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// What a real node writes outside the state directory, whatever its
// config says (docs/real-node.md, "Host paths"): these are found and
// removed when the node stops, and again before the next one starts, after
// a crash.
var (
	// nodeMountRoots: every mount at or under one of these is the node's
	// (the kubelet bind-mounts its root dir and mounts each pod's token
	// volumes under it). The node's containerd mounts sandboxes' /dev/shm,
	// containers' root file systems and the pods' network namespaces
	// (netns_mounts_under_state_dir) under its own state dir, in the
	// node's directory, which is added as a root: nothing mounted under
	// /run/containerd (another containerd's shims' tasks, docker's
	// included) nor in /run/netns (podman's, another CNI user's) is ever
	// the node's.
	nodeMountRoots = []string{kubeletRoot, nodeRunDir}
	// nodeRemovedPaths are removed whole once nothing is mounted under
	// them.
	nodeRemovedPaths = []string{kubeletRoot, "/run/containerd", nodeRunDir, containersLog,
		"/var/lib/cni/networks/" + nodeCNIName}
	// cniCacheDir holds libcni's cached results, one file per attachment,
	// named <network>-<container>-<interface>.
	cniCacheDir = "/var/lib/cni/results"
	// cniDirs are removed once empty, innermost first: the CNI plugins
	// create them, and nothing else here uses them.
	cniDirs = []string{cniCacheDir, "/var/lib/cni/networks", "/var/lib/cni"}
	// nodeCgroup is the kubelet's cgroup for pods, in every hierarchy.
	nodeCgroup = "kubepods"
)

// cgroupRoot is where the machine's cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// mountPoint is one line of /proc/self/mountinfo: its mount point, with
// the kernel's octal escapes (\040 for a space) undone.
type mountPoint string

// parseMountinfo returns the mount points of a /proc/<pid>/mountinfo.
func parseMountinfo(data string) []mountPoint {
	var out []mountPoint
	sc := bufio.NewScanner(strings.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		out = append(out, mountPoint(unescapeOctal(f[4])))
	}
	return out
}

// unescapeOctal undoes mountinfo's \NNN escapes.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// nodeMounts returns the mount points at or under one of roots, given
// every mount point of the machine: with nodeMountRoots and the node's
// own directory in the state dir, those that belong to a real node; with
// a path about to be removed, those still in place under it. Deepest
// first, so each can be unmounted in order; a path mounted twice is
// listed twice.
func nodeMounts(all []mountPoint, roots []string) []string {
	var out []string
	for _, m := range all {
		p := string(m)
		if slices.ContainsFunc(roots, func(r string) bool { return r != "" && under(p, r) }) {
			out = append(out, p)
		}
	}
	slices.SortStableFunc(out, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return out
}

// under reports whether path is dir or inside it.
func under(path, dir string) bool {
	dir = filepath.Clean(dir)
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// nodeProcess reports whether a command line (argv) is a process of a real
// node that may outlive it: a containerd shim serving the node's
// containerd (shims are reparented when containerd dies), or the node's
// containerd or kubelet themselves (their config in a real-node
// directory).
func nodeProcess(argv []string) bool {
	if len(argv) == 0 {
		return false
	}
	switch filepath.Base(argv[0]) {
	case "containerd-shim-runc-v2", "containerd-shim":
		for i, a := range argv {
			if (a == "-address" || a == "--address") && i+1 < len(argv) && argv[i+1] == containerdSocket() {
				return true
			}
		}
	case "containerd", "kubelet":
		for _, a := range argv {
			_, v, _ := strings.Cut(a, "=")
			if strings.HasSuffix(a, "/real-node/containerd.toml") || strings.HasSuffix(v, "/real-node/kubelet.yaml") {
				return true
			}
		}
	}
	return false
}

// cniCacheFile reports whether a file name in cniCacheDir is one of the
// node's: its bridge network's, or the loopback network containerd sets
// up in every sandbox ("cni-loopback").
func cniCacheFile(name string) bool {
	return strings.HasPrefix(name, nodeCNIName+"-") || strings.HasPrefix(name, "cni-loopback-")
}

// hostLeftovers is what a real node has on the machine.
type hostLeftovers struct {
	processes []int    // pids: shims, the node's daemons, the pods' processes
	mounts    []string // deepest first
	paths     []string // files and directories to remove
	cgroups   []string // kubepods cgroup directories, deepest first
	links     []string // veths on the bridge, then the bridge
	svcAddr   bool     // the service IP on lo
}

func (l hostLeftovers) empty() bool {
	return len(l.processes) == 0 && len(l.mounts) == 0 && len(l.paths) == 0 && len(l.cgroups) == 0 && len(l.links) == 0 && !l.svcAddr
}

// String summarizes l for a progress line or an error.
func (l hostLeftovers) String() string {
	var parts []string
	add := func(n int, what string, first []string) {
		if n == 0 {
			return
		}
		s := fmt.Sprintf("%d %s", n, what)
		if len(first) > 0 {
			s += " (" + strings.Join(first[:min(3, len(first))], ", ")
			if len(first) > 3 {
				s += ", …"
			}
			s += ")"
		}
		parts = append(parts, s)
	}
	pids := make([]string, len(l.processes))
	for i, p := range l.processes {
		pids[i] = strconv.Itoa(p)
	}
	add(len(l.processes), "processes", pids)
	add(len(l.mounts), "mounts", l.mounts)
	add(len(l.paths), "paths", l.paths)
	add(len(l.cgroups), "kubepods cgroups", l.cgroups)
	add(len(l.links), "network links", l.links)
	if l.svcAddr {
		parts = append(parts, serviceIP+"/32 on lo")
	}
	return strings.Join(parts, ", ")
}
