# lull — two commands for a newcomer:
#   make demo   build everything, start the local control plane, roll out an update
#   make test   run every test (unit, integration on a real API server, end to end, real node)

GO        ?= go
LULL      := bin/lull
TOOLS     := hack/build-tools.sh

.PHONY: all build images tools real-node-deps generate chart-sources verify-generated test test-unit test-integration test-e2e demo demo-real-node dev bench fuzz chaos

all: build

build:
	$(GO) build -o $(LULL) ./cmd/lull
	$(GO) build -o bin/lull-controller ./cmd/lull-controller
	rm -f bin/kubectl-lull  # an older build made it a link to lull, which go build may write through
	$(GO) build -o bin/kubectl-lull ./cmd/kubectl-lull  # the operator CLI alone: `kubectl lull` when on PATH

# The controller's and the agent's images, without Docker: an OCI
# layout in _out/oci and _out/<image>.tar (docker load -i, ctr image import).
images:
	$(GO) run ./hack/images --out _out --revision "$$(git rev-parse HEAD 2>/dev/null)"

# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the
# kubelet and kwok from the Go module proxy into ~/.cache/lull (first time
# ~10 minutes).
tools:
	$(TOOLS)

# What the real node needs from the machine (containerd, runc, the CNI
# plugins): installed with apt-get as root; otherwise it says why and what
# to run (a failure under LULL_REQUIRE_REAL_NODE=1, as in CI).
real-node-deps:
	hack/real-node-deps.sh

generate:
	$(GO) tool controller-gen object paths=./api/...
	$(GO) tool controller-gen crd:generateEmbeddedObjectMeta=true paths=./api/... output:crd:dir=config/crd/bases
	$(GO) tool controller-gen rbac:roleName=lull-controller paths=./internal/... output:rbac:dir=config/rbac
	$(MAKE) chart-sources

# The Helm chart ships the same CRDs, ClusterRole rules, leader-election
# rules and admission policies as config/: copied here byte for byte (Helm
# reads only files inside the chart), never edited in the chart.
CHART := charts/lull
chart-sources:
	rm -rf $(CHART)/crds $(CHART)/files
	mkdir -p $(CHART)/crds $(CHART)/files/rbac $(CHART)/files/admission
	cp config/crd/bases/*.yaml $(CHART)/crds/
	cp config/rbac/role.yaml config/rbac/leader_election_role.yaml $(CHART)/files/rbac/
	cp $$(ls config/admission/*.yaml | grep -v /kustomization.yaml) $(CHART)/files/admission/

# Fails when the committed CRDs, RBAC, deepcopy code or the chart's copies
# of them differ from the markers and config/.
verify-generated: generate
	git diff --exit-code -- api config $(CHART) || (echo "generated files are stale: run 'make generate' and commit"; exit 1)
	test -z "$$(git status --porcelain -- $(CHART)/crds $(CHART)/files)" || (echo "charts/lull has generated files not committed: run 'make generate' and commit"; exit 1)

demo: tools build
	$(LULL) dev --demo

# The demo with every session as real containers on the real node (Linux,
# root; docs/real-node.md).
demo-real-node: tools build real-node-deps
	$(LULL) dev --demo --real-node

dev: tools build
	$(LULL) dev

# Packages that start a control plane run one at a time (-p 1): on a 2-core
# machine, two of them at once measure the machine, not lull.
CLUSTER_PKGS := ./internal/dev/devcluster/ ./test/integration/ ./test/fleet/ ./test/e2e/ ./test/realnode/

test: tools verify-generated real-node-deps
	$(GO) vet ./...
	$(MAKE) test-unit
	$(GO) test -p 1 -count=1 -timeout 60m $(CLUSTER_PKGS)

# Unit tests only, the SDK's gate and the agent under the race detector; no
# control plane needed (test/dashboard checks the chart's dashboard alone).
# internal/dev/images builds the images twice: past go test's 10-minute
# default on a busy 2-core machine, hence the limit.
test-unit:
	$(GO) test -race -count=1 -timeout 20m $$($(GO) list ./... | grep -v -e /test/ -e /internal/dev/devcluster) ./test/dashboard/

# The fault scenarios alone (they also run in `make test`): 10 rollouts over
# 200 busy sessions with the controller killed every 15 s and an API server
# restart, leader failover, report storms. See docs/faults.md.
chaos: tools
	$(GO) test -p 1 -count=1 -timeout 60m -v -run 'TestChaosRollouts|TestLeaderFailover|TestReportStorm|TestTemplateFlips' ./test/e2e/

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeReport -fuzztime 30s ./drain/

bench: tools build
	$(LULL) bench --sessions 1000
