package devcluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// findLeftovers lists what a real node has on this machine; nodeDir is
// the node's directory in a state dir (<StateDir>/real-node) whose
// containerd mounts count too, empty if none is known.
func findLeftovers(nodeDir string) (hostLeftovers, error) {
	var l hostLeftovers
	var errs []error

	procs, err := os.ReadDir("/proc")
	if err != nil {
		return l, err
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		if nodeProcess(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")) {
			l.processes = append(l.processes, pid)
		}
	}

	hierarchies, err := os.ReadDir(cgroupRoot)
	if err != nil {
		errs = append(errs, err)
	}
	for _, h := range hierarchies {
		root := filepath.Join(cgroupRoot, h.Name(), nodeCgroup)
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for _, d := range dirs {
			for _, f := range []string{"cgroup.procs", "tasks"} {
				b, err := os.ReadFile(filepath.Join(d, f))
				if err != nil {
					continue
				}
				for _, s := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(s); err == nil && !slices.Contains(l.processes, pid) {
						l.processes = append(l.processes, pid)
					}
				}
			}
		}
		slices.Reverse(dirs) // WalkDir lists parents first
		l.cgroups = append(l.cgroups, dirs...)
	}

	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		errs = append(errs, err)
	}
	roots := slices.Clone(nodeMountRoots)
	if nodeDir != "" {
		roots = append(roots, nodeDir)
	}
	l.mounts = nodeMounts(parseMountinfo(string(mi)), roots)

	for _, p := range nodeRemovedPaths {
		if _, err := os.Lstat(p); err == nil {
			l.paths = append(l.paths, p)
		}
	}
	if entries, err := os.ReadDir(cniCacheDir); err == nil {
		for _, e := range entries {
			if cniCacheFile(e.Name()) {
				l.paths = append(l.paths, filepath.Join(cniCacheDir, e.Name()))
			}
		}
	}
	for _, d := range cniDirs {
		if entries, err := os.ReadDir(d); err == nil && len(entries) == 0 {
			l.paths = append(l.paths, d)
		}
	}

	if out, err := exec.Command("ip", "-o", "link", "show", "master", nodeBridge).Output(); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			// "7: veth1234@if2: <...>": the name before "@".
			f := strings.Fields(line)
			if len(f) > 1 {
				name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
				l.links = append(l.links, name)
			}
		}
	}
	if err := exec.Command("ip", "link", "show", nodeBridge).Run(); err == nil {
		l.links = append(l.links, nodeBridge)
	}
	out, err := exec.Command("ip", "-o", "-4", "addr", "show", "dev", "lo").Output()
	if err != nil {
		errs = append(errs, fmt.Errorf("ip addr show dev lo: %w", err))
	}
	l.svcAddr = strings.Contains(string(out), " "+serviceIP+"/32 ")
	return l, errors.Join(errs...)
}

// removeLeftovers removes l: processes killed (SIGKILL) and waited for,
// then mounts unmounted deepest first, paths removed (never across a
// mount: a path with something still mounted under it is left, and named),
// cgroups removed, links deleted, the service IP taken off lo. It goes on
// after an error and returns them all.
func removeLeftovers(l hostLeftovers) error {
	var errs []error
	for _, pid := range l.processes {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("kill %d: %w", pid, err))
		}
	}
	waitGone(l.processes, 10*time.Second)
	for _, m := range l.mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	still := parseMountinfo(string(mi))
	for _, p := range l.paths {
		if busy := nodeMounts(still, []string{p}); len(busy) > 0 {
			errs = append(errs, fmt.Errorf("not removing %s: %s is still mounted", p, busy[0]))
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	for _, d := range cniDirs {
		_ = syscall.Rmdir(d) // only once empty: another network's files stay
	}
	for _, cg := range l.cgroups {
		if err := rmdirRetry(cg); err != nil {
			errs = append(errs, err)
		}
	}
	for _, link := range l.links {
		if out, err := exec.Command("ip", "link", "delete", link).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find device") {
			errs = append(errs, fmt.Errorf("ip link delete %s: %w: %s", link, err, strings.TrimSpace(string(out))))
		}
	}
	if l.svcAddr {
		if out, err := exec.Command("ip", "addr", "del", serviceIP+"/32", "dev", "lo").CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip addr del %s/32 dev lo: %w: %s", serviceIP, err, strings.TrimSpace(string(out))))
		}
	}
	return errors.Join(errs...)
}

// waitGone waits until none of pids exists (a killed process's cgroup and
// mounts are released only once it has exited), at most timeout.
func waitGone(pids []int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for _, pid := range pids {
		for time.Now().Before(deadline) {
			if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
				break
			}
			// A zombie whose parent is not reaping it counts as gone.
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err != nil || strings.Contains(string(b), ") Z ") {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// rmdirRetry removes an empty cgroup directory; the kernel refuses
// (EBUSY) until the last process in it is gone, which can take a moment
// after it was killed.
func rmdirRetry(dir string) error {
	var err error
	for range 50 {
		if err = syscall.Rmdir(dir); err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", dir, err)
}

// addServiceAddress puts the kubernetes Service's IP on lo, where the
// service forward listens (there is no kube-proxy; a dummy link does not
// exist on these kernels, and on the CNI bridge the address breaks the
// bridge plugin).
func addServiceAddress() error {
	out, err := exec.Command("ip", "addr", "add", serviceIP+"/32", "dev", "lo").CombinedOutput()
	if err != nil && !strings.Contains(string(out), "File exists") {
		return fmt.Errorf("ip addr add %s/32 dev lo: %w: %s", serviceIP, err, strings.TrimSpace(string(out)))
	}
	return nil
}
