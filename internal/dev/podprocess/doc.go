// Package podprocess stands in for the kubelet on the local control plane:
// KWOK moves pods through their phases without running containers, and this
// runner starts each running session pod's runtime container as a process
// on the host, given the pod's UID the way the downward API gives it. When
// the pod is deleted the process is stopped (SIGTERM, then SIGKILL after
// the grace period), and the replacement pod gets a new process.
//
// # Restarts
//
// A runtime that exits on its own while its pod runs is treated as a
// kubelet treats a crashed container: the pod's status shows the container
// in CrashLoopBackOff, not ready, with its restart count, and the process is
// restarted after a back-off (10 s, doubling, at most 5 minutes); once the
// restarted process is up, the container shows running and ready again.
//
// # Volumes
//
// A process cannot have a volume mounted at a container path such as
// /workspace: it sees the host's file system. So each volume that holds
// data gets a host directory instead: an emptyDir a directory of its own,
// <Dir>/volumes/<pod UID>/<volume name>, created before the pod's first
// process starts and removed once the pod is finalized; a
// persistentVolumeClaim the hostPath directory of the PersistentVolume the
// claim is bound to (a pod whose claim is not bound yet is started once it
// is). A container's volumeMounts (with subPath or subPathExpr) then map
// its mount paths to host directories, and the runner rewrites every env
// value and every argument of the container in which a mount path occurs
// as a path prefix: with a claim mounted at /workspace,
// --dir=/workspace/src becomes --dir=<PV path>/src, /workspace2 stays. This
// is how a runtime under `lull dev` finds "the directory at the claim's
// mount path". For paths a runtime builds itself, LULL_DEV_MOUNTS
// (EnvDevMounts) lists the mapping, one mountPath=hostDir per line.
// A configMap volume gets a directory under <Dir>/volumes/<pod UID> with
// the ConfigMap's keys written as files (as the kubelet projects them), so
// a runtime under `lull dev` sees the template's spec.files at their mount
// path. secret, projected and downwardAPI volumes are not mapped; mounts
// are never read-only.
//
// # Credentials
//
// A process is authenticated as the pod's ServiceAccount (a kubeconfig in
// KUBECONFIG holding a TokenRequest token bound to the pod) only if its
// container would see a token on a real kubelet: the pod does not set
// automountServiceAccountToken to false, or the container mounts a
// projected volume with a serviceAccountToken source. A container without
// a token gets no KUBECONFIG.
//
// # The agent sidecar
//
// A pod with a restartable init container named lull-agent (the injected
// agent sidecar, lullv1.AgentContainerName) gets a process for it too,
// started first: the runtime starts once the agent accepts connections on
// its --listen address (the rewritten unix socket), which stands in for the
// sidecar's startup. On deletion the runtime is stopped first, then the
// agent, as sidecars terminate after the main containers. An agent that
// exits on its own is restarted with the runtime's back-off; only the
// runtime container's status is written. Other init containers, other
// sidecars and other containers are not run.
package podprocess
