package devcluster

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Nothing of the machine's own is touched (docs/real-node.md, "One per
// machine, and nothing left behind"): another kubelet's root is refused,
// not cleaned. The lock file keeps its record after a clean stop too, so
// it cannot tell "a lull real node crashed and left /var/lib/kubelet"
// from "a lull real node ran and stopped cleanly (removing
// /var/lib/kubelet), then the machine's own kubelet was installed or
// started and created /var/lib/kubelet". In the second case the next
// start accepts the foreign root as a leftover: findLeftovers lists it,
// removeLeftovers unmounts everything under it and removes it whole.
func TestAKubeletRootMadeAfterACleanStopIsRefusedNotCleaned(t *testing.T) {
	old := machineLockPath
	machineLockPath = filepath.Join(t.TempDir(), "real-node.lock")
	t.Cleanup(func() { machineLockPath = old })
	dir := t.TempDir()
	p := hostPaths{systemSocket: filepath.Join(dir, "system.sock"), nodeSocket: filepath.Join(dir, "node.sock"), kubeletRoot: filepath.Join(dir, "kubelet")}
	accept := func(prev machineHolder) error { return checkNotForeign(prev, p) }

	// A lull real node runs and stops cleanly: nothing of it is left.
	f, _, err := lockMachine("/tmp/lull-dev-1", accept)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()

	// The machine's own kubelet then makes its root.
	if err := os.Mkdir(p.kubeletRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	f, _, err = lockMachine("/tmp/lull-dev-2", accept)
	if err == nil {
		f.Close()
		t.Errorf("a kubelet root made after a lull real node stopped cleanly was accepted as that node's leftover (it would be unmounted and removed); want a refusal naming %s", p.kubeletRoot)
	}
}

// Nothing of the machine's own is touched: the mounts of another
// containerd are not the node's. The refusal of the machine's own
// containerd tells the user to `systemctl stop containerd`; its shims (and
// docker's containers, namespace "moby") keep running, with their root
// file systems mounted under /run/containerd/io.containerd.runtime.v2.task
// and the socket gone, so the next start passes checkNotForeign. nodeMounts
// then lists every mount under /run/containerd, whatever its containerd
// namespace: the running containers' root file systems are unmounted and
// /run/containerd removed whole. The node's containerd only uses the
// k8s.io namespace (Ctr, the CRI), and its task state is in the state dir.
func TestNodeMountsLeaveAnotherContainerdsContainers(t *testing.T) {
	mountinfo := strings.Join([]string{
		`22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw`,
		`60 22 0:60 / /run/containerd/io.containerd.runtime.v2.task/moby/0123abcd/rootfs rw - overlay overlay rw`,
		`61 22 0:61 / /run/containerd/io.containerd.runtime.v2.task/default/web/rootfs rw - overlay overlay rw`,
	}, "\n")
	got := nodeMounts(parseMountinfo(mountinfo), nodeMountRoots)
	for _, not := range []string{
		"/run/containerd/io.containerd.runtime.v2.task/moby/0123abcd/rootfs",
		"/run/containerd/io.containerd.runtime.v2.task/default/web/rootfs",
	} {
		if slices.Contains(got, not) {
			t.Errorf("another containerd's running container's root file system %s listed for unmounting", not)
		}
	}
}

// Nothing of the machine's own is touched: the node's containerd mounts
// its pods' network namespaces under its state directory
// (netns_mounts_under_state_dir = true in containerdConfig), never in
// /run/netns. Yet every /run/netns/cni-* is listed for unmounting and
// removal: those are another CNI user's (podman with its CNI backend
// names them cni-<uuid>, the machine's containerd or k3s too), whose
// running containers lose their network namespace's name.
func TestNodeMountsLeaveNetnsTheNodeDoesNotMake(t *testing.T) {
	if !strings.Contains(containerdConfig(newNodePaths("/tmp/st"), "pause"), "netns_mounts_under_state_dir = true") {
		t.Skip("the node's netns are in /run/netns again")
	}
	mountinfo := `47 22 0:4 net:[4026532301] /run/netns/cni-7f2c1a3e-podman rw - nsfs nsfs rw`
	got := nodeMounts(parseMountinfo(mountinfo), append(slices.Clone(nodeMountRoots), "/tmp/st/real-node"))
	if slices.Contains(got, "/run/netns/cni-7f2c1a3e-podman") {
		t.Errorf("a network namespace in /run/netns, which the node never makes, listed for unmounting: %q", got)
	}
}

// Everything the node wrote is removed on exit, "never across a mount
// still in place": removeLeftovers asks nodeMounts which mounts are still
// under each path it is about to remove. nodeMounts also lists every
// /run/netns/cni-* whatever the roots, so one such mount still in place
// (another runtime's, made after findLeftovers listed the mounts) is taken
// for a mount under /var/lib/kubelet, /var/log/containers and every other
// path: none is removed, and the error names a mount that is under none
// of them.
func TestAPathIsBusyOnlyWithAMountUnderIt(t *testing.T) {
	still := parseMountinfo(strings.Join([]string{
		`22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw`,
		`47 22 0:4 net:[4026532301] /run/netns/cni-7f2c1a3e rw - nsfs nsfs rw`,
	}, "\n"))
	for _, p := range []string{kubeletRoot, containersLog, nodeRunDir} {
		if busy := nodeMounts(still, []string{p}); len(busy) > 0 {
			t.Errorf("%s taken for busy by %q, which is not under it: it would be left, and named so", p, busy)
		}
	}
}
