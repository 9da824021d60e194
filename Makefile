# Orion. `make run` starts a single node; `make test` is everything CI runs.
GO       ?= go
BIN      := bin/orion
PKGS     := ./...
# Packages that own goroutines run under the race detector.
RACE_PKGS := ./internal/scheduler/... ./internal/executor/... ./internal/api/... ./internal/etcdserver/... \
             ./internal/leadership/... ./internal/server/... ./internal/client/... ./internal/cli/... ./internal/config/... \
             ./internal/workerstream/... ./internal/drill/...
# Pure packages run without it (the randomized core test is CPU-heavy).
PURE_PKGS := ./internal/core/... ./internal/dag/... ./internal/etcdlog/... ./internal/metrics/... ./internal/bench/...

.PHONY: all build run test test-unit test-race test-e2e bench lint fmt clean cluster cluster-down cluster-status

all: build

build:
	$(GO) build -o $(BIN) ./cmd/orion

run: build
	$(BIN) server --config config/orion.yaml

test: lint test-unit test-race test-e2e

lint:
	@out=$$(gofmt -l cmd internal test); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

test-unit:
	$(GO) test -count=1 $(PURE_PKGS)

test-race:
	$(GO) test -count=1 -race $(RACE_PKGS)

test-e2e: build
	ORION_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 15m ./test/...

bench: build
	$(BIN) bench

fmt:
	gofmt -w cmd internal test

clean:
	rm -rf bin

# A local cluster on 127.0.0.1 (3 etcd members, 3 servers, 2 workers) in
# ./.cluster; see test/cluster.sh. `test/cluster.sh down --purge` deletes it.
cluster: build
	test/cluster.sh up

cluster-down:
	test/cluster.sh down

cluster-status:
	test/cluster.sh status
