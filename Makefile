# lull — two commands for a newcomer:
#   make demo   build everything, start the local control plane, roll out an update
#   make test   run every test (unit, integration on a real API server, end to end)

GO        ?= go
LULL      := bin/lull
TOOLS     := hack/build-tools.sh

.PHONY: all build tools generate verify-generated test test-unit test-integration test-e2e demo dev bench fuzz

all: build

build:
	$(GO) build -o $(LULL) ./cmd/lull

# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok
# from the Go module proxy into ~/.cache/lull (first time ~10 minutes).
tools:
	$(TOOLS)

generate:
	$(GO) tool controller-gen object paths=./api/...
	$(GO) tool controller-gen crd paths=./api/... output:crd:dir=config/crd/bases
	$(GO) tool controller-gen rbac:roleName=lull-controller paths=./internal/... output:rbac:dir=config/rbac

# Fails when the committed CRDs, RBAC or deepcopy code differ from the markers.
verify-generated: generate
	git diff --exit-code -- api config || (echo "generated files are stale: run 'make generate' and commit"; exit 1)

demo: tools build
	$(LULL) dev --demo

dev: tools build
	$(LULL) dev

test: tools verify-generated
	$(GO) vet ./...
	$(GO) test -race -count=1 ./runtime/... ./internal/agent/... ./drain/...
	$(GO) test -count=1 -timeout 30m ./...

# Unit tests only: no control plane needed.
test-unit:
	$(GO) test -count=1 $$($(GO) list ./... | grep -v -e /test/ -e /internal/devcluster)

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeReport -fuzztime 30s ./drain/

bench: tools build
	$(LULL) bench --sessions 200
