#!/usr/bin/env bash
# Installs what the real-node tier (test/realnode, lull dev --real-node)
# needs from the machine's packages: containerd, runc and the CNI plugins
# (the kubelet comes from `make tools`). It installs them with apt-get when
# it runs as root on Linux and they are missing. Where it cannot, it says
# why and what to run, and exits 0 so that `make test` runs the rest (the
# tier then skips, naming the reason) — unless LULL_REQUIRE_REAL_NODE=1
# (.ci/run sets it), where that is a failure.
set -euo pipefail

PACKAGES=(containerd runc containernetworking-plugins)
NEEDED=(containerd ctr runc /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/loopback)

log() { printf '[real-node] %s\n' "$*" >&2; }

missing=()
for c in "${NEEDED[@]}"; do command -v "$c" >/dev/null 2>&1 || missing+=("$c"); done

why="" fix=""
if [[ "$(uname -s)" != Linux ]]; then
  why="the real node runs on Linux only (this is $(uname -s))"
  fix="run make test on a Linux machine"
elif [[ $EUID -ne 0 ]]; then
  why="the real node needs root (containerd, runc and the kubelet mount file systems, create cgroups and network links)"
  fix='sudo -E env "PATH=$PATH" make test (sudo resets PATH, where go must be found)'
elif ((${#missing[@]})); then
  if command -v apt-get >/dev/null 2>&1; then
    log "installing ${PACKAGES[*]} (missing: ${missing[*]})"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${PACKAGES[@]}" >/dev/null
    # The real node runs its own containerd; one the package started as a
    # service would share /run/containerd with it.
    if command -v systemctl >/dev/null 2>&1 && systemctl is-active -q containerd 2>/dev/null; then
      systemctl disable --now containerd >/dev/null 2>&1 || true
    fi
  else
    why="${missing[*]} missing and no apt-get to install them"
    fix="install containerd, ctr, runc and the CNI plugins bridge, host-local and loopback (into /usr/lib/cni) with this machine's package manager, then make test"
  fi
fi

if [[ -n "$why" ]]; then
  log "cannot run the real-node tier: $why; to run it: $fix"
  if [[ "${LULL_REQUIRE_REAL_NODE:-}" == 1 ]]; then
    log "LULL_REQUIRE_REAL_NODE=1: failing"
    exit 1
  fi
  exit 0
fi
log "containerd, runc and the CNI plugins are installed"
