#!/usr/bin/env bash
# Builds the local control plane's binaries from the Go module proxy into a
# cache directory outside the repository, keyed by version, so a clean clone
# reuses them. Idempotent: a binary already in the cache is not rebuilt.
#
#   hack/build-tools.sh            # build what is missing
#   hack/build-tools.sh --print    # print the cache directory
#
# The versions here are the single source of truth; internal/dev/devcluster reads
# the same layout (see internal/dev/devcluster/binaries.go).
set -euo pipefail

K8S_VERSION=v1.37.2
ETCD_VERSION=v3.6.8
KWOK_VERSION=v0.8.0

CACHE="${LULL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lull}"
BIN="$CACHE/bin"

if [[ "${1:-}" == "--print" ]]; then echo "$BIN"; exit 0; fi

log() { printf '[tools] %s\n' "$*" >&2; }

have() { [[ -x "$1" ]] && "$1" --version >/dev/null 2>&1; }

# build_k8s builds kube-apiserver, kube-controller-manager, kube-scheduler and
# the kubelet (the local environment's real node, docs/real-node.md).
# k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them
# with ./staging paths that do not exist in the module zip, so a separate
# module requires k8s.io/kubernetes and replaces each staging module with its
# published v0.x version.
build_k8s() {
  local out="$BIN/kubernetes-$K8S_VERSION"
  local want=(kube-apiserver kube-controller-manager kube-scheduler kubelet)
  local missing=()
  for b in "${want[@]}"; do have "$out/$b" || missing+=("$b"); done
  [[ ${#missing[@]} -eq 0 ]] && { log "kubernetes $K8S_VERSION: cached"; return; }
  log "kubernetes $K8S_VERSION: building ${missing[*]} (first build takes ~10 min)"
  local work="$CACHE/src/kubernetes-$K8S_VERSION"
  mkdir -p "$work" "$out"
  local staging_version="v0${K8S_VERSION#v1}"
  if [[ ! -f "$work/go.mod" ]]; then
    local proxy; proxy="$(go env GOPROXY | cut -d, -f1)"
    local modfile; modfile="$(curl -fsSL "$proxy/k8s.io/kubernetes/@v/$K8S_VERSION.mod")"
    {
      echo "module lull.dev/tools/kubernetes"
      echo
      echo "go 1.26"
      echo
      echo "require k8s.io/kubernetes $K8S_VERSION"
      echo
      echo "replace ("
      grep '=> ./staging/' <<<"$modfile" | awk -v v="$staging_version" '{print "\t" $1 " => " $1 " " v}'
      echo ")"
    } >"$work/go.mod"
  fi
  # A cache built before the kubelet was added holds a tools.go without it:
  # a changed tools.go is tidied again (the kubelet needs a few more modules).
  local tools; tools="$(printf '//go:build tools\n\npackage tools\n\nimport (\n'; for b in "${want[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$b"; done; printf ')\n')"
  if [[ ! -f "$work/go.sum" || "$(cat "$work/tools.go" 2>/dev/null)" != "$tools" ]]; then
    printf '%s\n' "$tools" >"$work/tools.go"
    (cd "$work" && GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true)
    (cd "$work" && GOFLAGS=-mod=mod go mod download k8s.io/kubernetes)
  fi
  local minor; minor="$(cut -d. -f2 <<<"$K8S_VERSION")"
  local ldflags="-s -w"
  ldflags+=" -X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
  ldflags+=" -X k8s.io/component-base/version.gitMajor=1"
  ldflags+=" -X k8s.io/component-base/version.gitMinor=$minor"
  ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
  ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
  ldflags+=" -X k8s.io/client-go/pkg/version.gitMajor=1"
  ldflags+=" -X k8s.io/client-go/pkg/version.gitMinor=$minor"
  for b in "${missing[@]}"; do
    log "  go build k8s.io/kubernetes/cmd/$b"
    (cd "$work" && GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$out/$b.tmp" "k8s.io/kubernetes/cmd/$b")
    mv "$out/$b.tmp" "$out/$b"
  done
}

# build_module builds one binary from a module version inside a throwaway
# module that requires it: go install pkg@version refuses modules whose go.mod
# has replace directives (etcd's does).
build_module() {
  local name="$1" mod="$2" pkg="$3" version="$4" ldflags="${5:-}"
  local out="$BIN/$name-$version"
  if have "$out/$name"; then log "$name $version: cached"; return; fi
  log "$name $version: building $pkg@$version"
  local work="$CACHE/src/$name-$version"
  mkdir -p "$out" "$work"
  if [[ ! -f "$work/go.mod" ]]; then
    printf 'module lull.dev/tools/%s\n\ngo 1.26\n\nrequire %s %s\n' "$name" "$mod" "$version" >"$work/go.mod"
    printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$pkg" >"$work/tools.go"
  fi
  (cd "$work" && GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w $ldflags" -o "$out/$name.tmp" "$pkg")
  mv "$out/$name.tmp" "$out/$name"
}

# kwok's stage definitions ship in its module under kustomize/stage; kwok
# exits with "no stages found" without them. Copy them beside the binary.
copy_kwok_stages() {
  local out="$BIN/kwok-$KWOK_VERSION"
  [[ -d "$out/stage" ]] && return
  local dir; dir="$(GOFLAGS= go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  mkdir -p "$out/stage.tmp"
  cp -r "$dir/kustomize/stage/." "$out/stage.tmp/"
  chmod -R u+w "$out/stage.tmp"
  mv "$out/stage.tmp" "$out/stage"
}

mkdir -p "$BIN"
build_module etcd go.etcd.io/etcd/server/v3 go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
build_module kwok sigs.k8s.io/kwok sigs.k8s.io/kwok/cmd/kwok "$KWOK_VERSION" "-X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}"
copy_kwok_stages
build_k8s
log "binaries in $BIN"
