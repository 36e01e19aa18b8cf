package devcluster

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Every mount a real node makes, and only those, is found for clean-up,
// deepest first, so unmounting in order never leaves one under another:
// the kubelet's bind mount of its root and the pods' token volumes under
// it, and containerd's mounts in its state dir: sandboxes' shm,
// containers' root file systems (the task dir is in the state dir) and
// the pods' network namespaces (netns_mounts_under_state_dir). The
// machine's own mounts are never listed, not even one whose path merely
// starts like a node path, nor any in /run/netns or under /run/containerd,
// where the node's containerd mounts nothing: those are another runtime's,
// a cni-* netns and a k8s.io task included (the machine's own containerd
// or k3s makes them too).
func TestNodeMountsFindsEveryNodeMountDeepestFirst(t *testing.T) {
	const state = "/tmp/st/real-node/containerd/state"
	mountinfo := strings.Join([]string{
		`22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw`,
		`25 22 0:21 / /sys/fs/cgroup rw shared:4 - tmpfs tmpfs rw`,
		`40 22 254:0 /var/lib/kubelet /var/lib/kubelet rw shared:20 - ext4 /dev/vda rw`,
		`41 40 0:50 / /var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~projected/kube-api-access-x rw - tmpfs tmpfs rw`,
		`42 22 0:4 net:[4026532300] ` + state + `/io.containerd.grpc.v1.cri/netns/cni-1234 rw shared:21 - nsfs nsfs rw`,
		`43 22 0:51 / ` + state + `/io.containerd.grpc.v1.cri/sandboxes/abc/shm rw - tmpfs shm rw`,
		`44 22 0:52 / ` + state + `/io.containerd.runtime.v2.task/k8s.io/abc/rootfs rw - overlay overlay rw`,
		`45 22 254:0 / /var/lib/kubelet-other rw - ext4 /dev/vda rw`,
		`46 22 0:53 / /tmp/st/real-node/a\040b rw - tmpfs tmpfs rw`,
		`47 22 0:4 net:[4026532301] /run/netns/other rw - nsfs nsfs rw`,
		`48 22 0:4 net:[4026532302] /run/netns/cni-5678 rw - nsfs nsfs rw`,
		`49 22 0:54 / /run/containerd/io.containerd.runtime.v2.task/k8s.io/def/rootfs rw - overlay overlay rw`,
	}, "\n")
	got := nodeMounts(parseMountinfo(mountinfo), append(slices.Clone(nodeMountRoots), "/tmp/st/real-node"))
	for _, want := range []string{
		"/var/lib/kubelet",
		"/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~projected/kube-api-access-x",
		state + "/io.containerd.grpc.v1.cri/netns/cni-1234",
		state + "/io.containerd.grpc.v1.cri/sandboxes/abc/shm",
		state + "/io.containerd.runtime.v2.task/k8s.io/abc/rootfs",
		"/tmp/st/real-node/a b",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("mount %s not found; got %q", want, got)
		}
	}
	for _, not := range []string{"/", "/sys/fs/cgroup", "/var/lib/kubelet-other", "/run/netns/other", "/run/netns/cni-5678", "/run/containerd/io.containerd.runtime.v2.task/k8s.io/def/rootfs"} {
		if slices.Contains(got, not) {
			t.Errorf("the machine's mount %s listed for clean-up", not)
		}
	}
	if i, j := slices.Index(got, "/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~projected/kube-api-access-x"), slices.Index(got, "/var/lib/kubelet"); i > j {
		t.Errorf("a pod's volume is unmounted after the kubelet root it is under: %q", got)
	}
}

// The processes that outlive a crashed real node are found by their
// command line: shims of the node's containerd, and its containerd and
// kubelet; a shim of another containerd, or another program, is not.
func TestNodeProcessFindsOnlyTheNodesOwn(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want bool
	}{
		{[]string{"/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-id", "abc", "-address", containerdSocket()}, true},
		{[]string{"/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-id", "abc", "-address", "/run/containerd/containerd.sock"}, false},
		{[]string{"containerd", "--config", "/tmp/lull-dev-1/real-node/containerd.toml"}, true},
		{[]string{"containerd", "--config", "/etc/containerd/config.toml"}, false},
		{[]string{"/root/.cache/lull/bin/kubernetes-v1.37.2/kubelet", "--config=/tmp/lull-dev-1/real-node/kubelet.yaml"}, true},
		{[]string{"/usr/bin/kubelet", "--config=/var/lib/kubelet/config.yaml"}, false},
		{[]string{"sleep", "-address", containerdSocket()}, false},
		{nil, false},
	} {
		if got := nodeProcess(tc.argv); got != tc.want {
			t.Errorf("nodeProcess(%q) = %v, want %v", tc.argv, got, tc.want)
		}
	}
}

// The CNI results the node's sandboxes leave are told from another
// network's: its bridge network's and containerd's loopback.
func TestCNICacheFileIsTheNodesOnly(t *testing.T) {
	for name, want := range map[string]bool{
		nodeCNIName + "-abc123-eth0": true,
		"cni-loopback-abc123-lo":     true,
		"mynet-abc123-eth0":          false,
	} {
		if got := cniCacheFile(name); got != want {
			t.Errorf("cniCacheFile(%q) = %v, want %v", name, got, want)
		}
	}
}

// A second real node on the machine is refused while the first holds the
// lock, with an error naming the holder's pid and state dir; once the
// first is gone (crashed, its record kept) the lock is free, and the next
// holder learns the last one's state dir (whose leftovers it must remove).
func TestMachineLockRefusesASecondNodeNamingTheHolder(t *testing.T) {
	old := machineLockPath
	machineLockPath = filepath.Join(t.TempDir(), "real-node.lock")
	t.Cleanup(func() { machineLockPath = old })

	first, prev, err := lockMachine("/tmp/state-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if prev != (machineHolder{}) {
		t.Errorf("first holder since boot sees a previous holder %+v", prev)
	}
	_, _, err = lockMachine("/tmp/state-b", nil)
	if !errors.Is(err, ErrRealNodeInUse) {
		t.Fatalf("second lock: %v, want ErrRealNodeInUse", err)
	}
	for _, want := range []string{"pid " + strconv.Itoa(os.Getpid()), "state dir /tmp/state-a", "without --real-node"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not name %q", err, want)
		}
	}
	if err := CheckRealNodeFree(); !errors.Is(err, ErrRealNodeInUse) || !strings.Contains(err.Error(), "/tmp/state-a") {
		t.Errorf("CheckRealNodeFree while held: %v, want ErrRealNodeInUse naming the holder", err)
	}
	first.release() // a crash: the lock is released, the record stays
	if err := CheckRealNodeFree(); err != nil {
		t.Errorf("CheckRealNodeFree once released: %v", err)
	}
	second, prev, err := lockMachine("/tmp/state-b", nil)
	if err != nil {
		t.Fatalf("lock after the first holder released it: %v", err)
	}
	defer second.Close()
	if prev.StateDir != "/tmp/state-a" {
		t.Errorf("previous holder's state dir %q, want /tmp/state-a", prev.StateDir)
	}
}

// The kubelet's configuration holds what these machines need (cgroup v1
// allowed, the cgroupfs driver, the node's containerd), no anonymous
// access, the real node's taint, and no image garbage collection (the
// imported images cannot be pulled again).
func TestKubeletConfigForTheseMachines(t *testing.T) {
	var conf map[string]any
	if err := json.Unmarshal([]byte(kubeletConfig(kubeletSettings{CAFile: "/ca.crt", Port: 1, HealthzPort: 2, Socket: "/run/x.sock", PodLogsDir: "/p"})), &conf); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]any{
		"failCgroupV1":                false,
		"cgroupDriver":                "cgroupfs",
		"containerRuntimeEndpoint":    "unix:///run/x.sock",
		"imageGCHighThresholdPercent": float64(100),
		"readOnlyPort":                float64(0),
	} {
		if conf[key] != want {
			t.Errorf("%s = %v, want %v", key, conf[key], want)
		}
	}
	if anon := conf["authentication"].(map[string]any)["anonymous"].(map[string]any)["enabled"]; anon != false {
		t.Errorf("anonymous authentication %v, want false", anon)
	}
	taints := conf["registerWithTaints"].([]any)
	if len(taints) != 1 || taints[0].(map[string]any)["key"] != RealNodeTaint {
		t.Errorf("registerWithTaints %v, want the real node's taint", taints)
	}
}

// containerd gets restrict_oom_score_adj (without it no sandbox starts on
// these machines), cgroupfs, its own sockets and the pause image.
func TestContainerdConfigForTheseMachines(t *testing.T) {
	conf := containerdConfig(newNodePaths("/tmp/st"), "example/pause:v1")
	for _, want := range []string{
		"restrict_oom_score_adj = true",
		"SystemdCgroup = false",
		`sandbox_image = "example/pause:v1"`,
		`address = "` + containerdSocket() + `"`,
		`root = "/tmp/st/real-node/containerd/root"`,
		`"io.containerd.internal.v1.opt"`,
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("containerd config lacks %s:\n%s", want, conf)
		}
	}
}

// Host paths the clean-up would remove are refused when they are not a
// lull real node's: a kubelet root or the node's socket with no record of
// a lull real node since boot, or the machine's own containerd; with a
// record (a crashed run's), they are leftovers to remove.
func TestForeignHostPathsAreRefusedNotCleaned(t *testing.T) {
	dir := t.TempDir()
	p := hostPaths{systemSocket: filepath.Join(dir, "system.sock"), nodeSocket: filepath.Join(dir, "node.sock"), kubeletRoot: filepath.Join(dir, "kubelet")}
	if err := checkNotForeign(machineHolder{}, p); err != nil {
		t.Fatalf("a clean machine refused: %v", err)
	}
	if err := os.Mkdir(p.kubeletRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	err := checkNotForeign(machineHolder{}, p)
	if err == nil || !strings.Contains(err.Error(), p.kubeletRoot) || !strings.Contains(err.Error(), "rm -rf") {
		t.Errorf("a kubelet root with no record of a lull real node: %v, want a refusal naming it and the fix", err)
	}
	if err := checkNotForeign(machineHolder{PID: "1", StateDir: "/tmp/st"}, p); err != nil {
		t.Errorf("a crashed lull real node's kubelet root refused: %v", err)
	}
	if err := os.WriteFile(p.systemSocket, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkNotForeign(machineHolder{PID: "1", StateDir: "/tmp/st"}, p); err == nil || !strings.Contains(err.Error(), "systemctl stop containerd") {
		t.Errorf("the machine's own containerd: %v, want a refusal with the fix", err)
	}
}

// A lock held only for a moment (a CheckRealNodeFree, a start between its
// flock and its record write) is waited for, not refused; one held on
// with no live process on record is refused naming the cause and the fix,
// with no pid to kill.
func TestALockHeldForAMomentIsWaitedForAndANamelessHolderGetsNoKill(t *testing.T) {
	old := machineLockPath
	machineLockPath = filepath.Join(t.TempDir(), "real-node.lock")
	t.Cleanup(func() { machineLockPath = old })
	if err := os.WriteFile(machineLockPath, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	check, err := os.Open(machineLockPath)
	if err != nil {
		t.Fatal(err)
	}
	if held, err := tryLock(check); err != nil || held {
		t.Fatalf("tryLock: held %v, %v", held, err)
	}
	err = CheckRealNodeFree()
	if !errors.Is(err, ErrRealNodeInUse) {
		t.Fatalf("CheckRealNodeFree with the lock held on: %v, want ErrRealNodeInUse", err)
	}
	containsAll(t, "held by no node on record", err.Error(), machineLockPath, "start again", "fuser -v")
	if strings.Contains(err.Error(), "kill") {
		t.Errorf("refusal %q names a process to kill, with none on record", err)
	}

	go func() {
		time.Sleep(3 * lockRetryEvery)
		check.Close()
	}()
	f, _, err := lockMachine("/tmp/state-a", nil)
	if err != nil {
		t.Fatalf("a lock held for %v refused: %v", 3*lockRetryEvery, err)
	}
	f.Close()
}
