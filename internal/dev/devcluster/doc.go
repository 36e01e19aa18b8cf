// Package devcluster starts a real local Kubernetes control plane on this
// machine: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
// KWOK simulating one node. It backs `lull dev` and the end-to-end tests.
//
// The binaries are built by hack/build-tools.sh (`make tools`) into a cache
// directory keyed by version; see [FindBinaries]. Every child process runs in
// its own process group, logs to <StateDir>/logs/<component>.log and is
// killed by the kernel if this process dies.
package devcluster
