package devcluster

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
)

// Real node settings. The host paths are the machine's: one real node runs
// on a machine at a time (see lockMachine).
const (
	// RealNodeTaint keeps every pod that does not tolerate it off the real
	// node: the pods of the KWOK-only tests and demo stay where they were.
	RealNodeTaint = "lull.dev/real-node"
	// RealNodeLabel marks the real node (value "true").
	RealNodeLabel = "lull.dev/real-node"

	// nodeRunDir holds containerd's sockets: a short, fixed path, since a
	// unix socket path has at most 107 bytes and a shim's -address names it
	// (so a shim of a crashed run is found by it).
	nodeRunDir = "/run/lull-real-node"
	// nodeBridge is the CNI bridge; nodePodCIDR its pods' addresses.
	nodeBridge    = "lull0"
	nodePodCIDR   = "10.89.0.0/24"
	nodeCNIName   = "lull-real-node"
	cniBinDir     = "/usr/lib/cni"
	kubeletRoot   = "/var/lib/kubelet"
	containersLog = "/var/log/containers"
)

// nodePaths are the files of the real node inside the state directory.
type nodePaths struct {
	dir             string // <StateDir>/real-node
	containerdConf  string
	containerdRoot  string
	containerdState string
	cniConfDir      string
	kubeletConf     string
	kubeletKubecfg  string
	podLogs         string
}

func newNodePaths(stateDir string) nodePaths {
	dir := filepath.Join(stateDir, "real-node")
	return nodePaths{
		dir:             dir,
		containerdConf:  filepath.Join(dir, "containerd.toml"),
		containerdRoot:  filepath.Join(dir, "containerd", "root"),
		containerdState: filepath.Join(dir, "containerd", "state"),
		cniConfDir:      filepath.Join(dir, "cni"),
		kubeletConf:     filepath.Join(dir, "kubelet.yaml"),
		kubeletKubecfg:  filepath.Join(dir, "kubelet.kubeconfig"),
		podLogs:         filepath.Join(dir, "pod-logs"),
	}
}

// containerdSocket is containerd's gRPC socket; its ttrpc socket is the
// same path with ".ttrpc".
func containerdSocket() string { return filepath.Join(nodeRunDir, "containerd.sock") }

// containerdConfig renders containerd 1.6's config (version 2): its own
// root, state and sockets, the CRI plugin with runc under cgroupfs, the
// pause image as sandbox image and CNI from confDir.
//
// restrict_oom_score_adj is what lets any sandbox start on these machines:
// the kubelet asks an oom_score_adj of -998 for sandboxes, which needs
// CAP_SYS_RESOURCE they lack, and runc then fails every create with "can't
// get final child's PID from pipe: EOF". The opt plugin is disabled: it
// would create /opt/containerd; the pods' network namespaces are mounted
// under the state directory, not /run/netns.
func containerdConfig(p nodePaths, pauseImage string) string {
	q := strconv.Quote
	return fmt.Sprintf(`version = 2
root = %s
state = %s
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = %s

[ttrpc]
  address = %s

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %s
  restrict_oom_score_adj = true
  enable_selinux = false
  netns_mounts_under_state_dir = true

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %s
    conf_dir = %s
    max_conf_num = 1
`, q(p.containerdRoot), q(p.containerdState), q(containerdSocket()), q(containerdSocket()+".ttrpc"),
		q(pauseImage), q(cniBinDir), q(p.cniConfDir))
}

// cniConfig renders the bridge network: pods get an address of
// nodePodCIDR behind the bridge, which is their gateway, and no
// masquerade (they only talk to this host).
func cniConfig() string {
	conf := map[string]any{
		"cniVersion": "0.4.0",
		"name":       nodeCNIName,
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      nodeBridge,
				"isGateway":   true,
				"ipMasq":      false,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":   "host-local",
					"ranges": []any{[]any{map[string]any{"subnet": nodePodCIDR}}},
					"routes": []any{map[string]any{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{"type": "loopback"},
		},
	}
	b, _ := json.MarshalIndent(conf, "", "  ")
	return string(b) + "\n"
}

// kubeletSettings are what kubeletConfig needs of the cluster.
type kubeletSettings struct {
	CAFile             string
	ServingCert        certFiles
	Port, HealthzPort  int
	PodLogsDir, Socket string
}

// kubeletConfig renders a KubeletConfiguration (JSON, which the kubelet
// reads as YAML) for these machines: cgroup v1 allowed (failCgroupV1:
// false, else v1.37 refuses to start), the cgroupfs driver, containerd's
// socket, x509 and webhook authentication with no anonymous access (the
// API server has a client certificate), the real node's taint, and image
// garbage collection and disk eviction off, since the imported images
// cannot be pulled again.
func kubeletConfig(s kubeletSettings) string {
	conf := map[string]any{
		"apiVersion":               "kubelet.config.k8s.io/v1beta1",
		"kind":                     "KubeletConfiguration",
		"failCgroupV1":             false,
		"cgroupDriver":             "cgroupfs",
		"containerRuntimeEndpoint": "unix://" + s.Socket,
		"address":                  loopbackHost,
		"port":                     s.Port,
		"readOnlyPort":             0,
		"healthzBindAddress":       loopbackHost,
		"healthzPort":              s.HealthzPort,
		"tlsCertFile":              s.ServingCert.CertFile,
		"tlsPrivateKeyFile":        s.ServingCert.KeyFile,
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true},
			"x509":      map[string]any{"clientCAFile": s.CAFile},
		},
		"authorization":               map[string]any{"mode": "Webhook"},
		"clusterDomain":               "cluster.local",
		"resolvConf":                  "/etc/resolv.conf",
		"failSwapOn":                  false,
		"podLogsDir":                  s.PodLogsDir,
		"volumePluginDir":             filepath.Join(kubeletRoot, "volume-plugins"),
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"evictionHard":                map[string]string{"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
		"registerWithTaints":          []any{map[string]any{"key": RealNodeTaint, "value": "true", "effect": "NoSchedule"}},
		"shutdownGracePeriod":         "0s",
		"serializeImagePulls":         false,
	}
	b, _ := json.MarshalIndent(conf, "", "  ")
	return string(b) + "\n"
}
