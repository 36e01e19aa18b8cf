// Package dev is the root of lull's harness: what runs lull on this
// machine and measures it, none of which a cluster runs. Under it:
// devcluster (the local control plane: etcd, kube-apiserver, the
// controllers, KWOK), podprocess (the kubelet's stand-in: a runtime process
// per running session pod), devstorage (the lull-dev StorageClass),
// install (applies the shipped manifests), localenv and demo (`lull dev`),
// bench (`lull bench`), scenario, audit and journal (the end-to-end
// scenarios, the independent auditor and the runtimes' turn journals),
// suite (the start and stop of the plane the e2e, fleet and real-node
// suites run on),
// testenv (the helpers tests in several packages share: polling and the
// fake clients' scheme), and devcmd (the commands of the dev binary,
// lull).
//
// Production packages never import the harness:
// TestProductionImportsNoHarness holds the direction for the whole module,
// and TestProductionBinariesLinkOnlyTheirOwn the packages each production
// binary (lull-controller, lull-agent, kubectl-lull) links.
package dev
