# Orion. `make run` starts a single node; `make test` is everything CI runs.
GO       ?= go
BIN      := bin/orion
PKGS     := ./...
# Packages that own goroutines run under the race detector.
RACE_PKGS := ./internal/engine/... ./internal/worker/... ./internal/http/api/... ./internal/etcdmember/... \
             ./internal/server/... ./internal/client/... ./internal/cli/... ./internal/config/... \
             ./internal/workerstream/... ./internal/tools/drill/... ./internal/http/events/... ./internal/http/seedapi/... \
             ./internal/kubelabel/... ./internal/kube/... ./internal/http/guard/... ./internal/http/kit/... \
             ./internal/store/... ./internal/http/demo/... ./internal/schedule/firer/... ./internal/leaderapart/... \
             ./internal/http/auth/...
# Pure packages run without it (the randomized core test is CPU-heavy).
PURE_PKGS := ./internal/model/... ./internal/jsonguard/... ./internal/expr/... ./internal/http/apitypes/... ./internal/core/... ./internal/dag/... ./internal/schedule ./internal/metrics/... ./internal/tools/bench/... \
             ./internal/http/console/... ./internal/tools/procfs/... ./internal/http/openapi/... ./internal/http/tlsfiles/...

# The web console (internal/http/console/web, TypeScript) is built into
# internal/http/console/dist, which go:embed takes into the binary. `make build`
# (and so `make run`) builds it first when npm is installed; without npm,
# orion still builds and serves a page at / that says to run `make console`.
NPM          ?= npm
CONSOLE_WEB  := internal/http/console/web
CONSOLE_DIST := internal/http/console/dist/index.html
CONSOLE_SRC  := $(wildcard $(CONSOLE_WEB)/src/*) $(CONSOLE_WEB)/index.html $(CONSOLE_WEB)/vite.config.ts \
                $(CONSOLE_WEB)/tsconfig.json $(CONSOLE_WEB)/package.json $(CONSOLE_WEB)/package-lock.json
HAVE_NPM     := $(shell command -v $(NPM) 2>/dev/null)

.PHONY: all build run test deps test-fuzz fuzz test-unit test-race test-e2e drills bench lint fmt clean cluster cluster-down cluster-status \
        chart-test chart-manifests console test-console kube-up kube-test kube-down kube-build openapi openapi-check

all: build

build: $(if $(HAVE_NPM),console)
	$(GO) build -o $(BIN) ./cmd/orion

run: build
	$(BIN) server --config config/orion.yaml

test: deps lint openapi-check test-unit test-race test-fuzz test-e2e chart-test test-console

# What make test needs beyond Go (.ci/run installs it on a fresh machine):
# command:Debian package.
TEST_DEPS := chromium:chromium etcdctl:etcd-client jq:jq node:nodejs npm:npm
deps:
	@missing=""; for d in $(TEST_DEPS); do \
		command -v "$${d%%:*}" >/dev/null 2>&1 || missing="$$missing $${d#*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "make test needs:$$missing. Install with: apt-get install -y$$missing (or run .ci/run, which does)"; exit 1; \
	fi

# staticcheck, pinned, built through the Go module proxy into .cache.
STATICCHECK_VERSION := v0.8.2
STATICCHECK         := $(CURDIR)/.cache/staticcheck/$(STATICCHECK_VERSION)/staticcheck

$(STATICCHECK):
	GOBIN=$(dir $(STATICCHECK)) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

lint: $(STATICCHECK)
	@out=$$(gofmt -l cmd internal test); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(STATICCHECK) $(PKGS)
	cd test/helm && $(STATICCHECK) ./...

test-unit:
	$(GO) test -count=1 $(PURE_PKGS)

test-race:
	$(GO) test -count=1 -race $(RACE_PKGS)

# -p 1: test/e2e and test/drills each run whole clusters; two at once on 2
# cores turn 1 s leases into spurious failovers. test/drills runs its short
# subset here (ORION_DRILLS unset); make drills runs them all.
test-e2e: build
	ORION_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -p 1 -timeout 15m ./test/...

# Fault drills (test/drills): every fault ORION_DRILL_COUNT times (default 3)
# on a cluster of real processes, the history checked after each, and a
# table of the figures at the end. make test runs only a short subset.
ORION_DRILL_COUNT ?= 3
# The big DAG's size in make drills (issue 31's acceptance); make test runs 20,000.
ORION_BIG_DAG_TASKS ?= 100000
drills: build
	ORION_DRILLS=1 ORION_DRILL_COUNT=$(ORION_DRILL_COUNT) ORION_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 60m -v -run TestDrills ./test/drills
	ORION_BIG_DAG_TASKS=$(ORION_BIG_DAG_TASKS) ORION_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 30m -v -run TestBigDAGThroughLeaderKill ./test/e2e

# Fuzz targets: package:target. make test runs each for FUZZ_SMOKE (their
# seed corpora also run as ordinary tests): a count of executions, not a
# time, so a slow machine never cuts a run short; make fuzz for FUZZTIME each.
FUZZ_TARGETS := ./internal/dag:FuzzParse ./internal/http/seedapi:FuzzParseSubmission ./internal/store:FuzzDecode ./internal/core:FuzzApply
FUZZ_SMOKE   ?= 500x
FUZZTIME     ?= 10m

test-fuzz:
	@for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t#*:} ($${t%%:*}) for $(FUZZ_SMOKE)"; \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZ_SMOKE) "$${t%%:*}" || exit 1; \
	done

fuzz:
	@$(MAKE) --no-print-directory test-fuzz FUZZ_SMOKE=$(FUZZTIME)

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

# --- Kubernetes: charts/orion and deploy/ -------------------------------------
# test/helm is its own Go module (the Kubernetes API packages stay out of
# orion's). helm is built from source, pinned, into .cache/helm/VERSION (the
# first build takes about 2 minutes); its default Kubernetes version is the
# one of its client-go.
HELM_VERSION    := v3.22.0
HELM_KUBE_MINOR := 37
HELM            := $(CURDIR)/.cache/helm/$(HELM_VERSION)/helm
HELM_LDFLAGS    := -s -w -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
                   -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$(HELM_KUBE_MINOR) \
                   -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$(HELM_KUBE_MINOR)
CHART           := charts/orion

$(HELM):
	GOBIN=$(dir $(HELM)) $(GO) install -ldflags '$(HELM_LDFLAGS)' helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

# Lint and render the chart over test/helm/values/*.yaml, then test/helm:
# strict decoding into the Kubernetes types and the chart's properties, the
# schema refusing bad values, deploy/ in sync with the chart, the
# Dockerfile's build command, and the rendered cluster run as local
# processes (TestFidelity; ORION_BIN=... to use a given binary).
chart-test: $(HELM) build
	$(HELM) lint --strict $(CHART)
	@for f in test/helm/values/*.yaml $(CHART)/values-small.yaml; do \
		echo "helm lint --strict + helm template: $$f"; \
		out=$$($(HELM) lint --strict $(CHART) -f $$f 2>&1) || { echo "$$out"; exit 1; }; \
		$(HELM) template orion $(CHART) --namespace orion -f $$f >/dev/null || exit 1; \
	done
	@cd test/helm && out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	cd test/helm && $(GO) vet ./...
	cd test/helm && HELM=$(HELM) ORION_BIN=$${ORION_BIN:-$(CURDIR)/$(BIN)} $(GO) test -count=1 -timeout 10m ./...

# Regenerate deploy/manifests/orion.yaml and deploy/prometheus/orion-alerts.yaml
# from the chart (chart-test fails until they are in sync).
chart-manifests: $(HELM)
	cd test/helm && HELM=$(HELM) $(GO) test -count=1 -run 'TestDeploy(Manifests|Alerts)$$' . -update

# A real single-node cluster (root only; test/kube/cluster.sh): Kubernetes
# and CoreDNS built from their Go modules at pinned versions, containerd,
# runc, CNI plugins and etcd from Debian, images written locally. Binaries
# and images are cached in /var/cache/orion-kube (ORION_KUBE_CACHE), outside
# the checkout: the first build takes 6-20 minutes on 2 cores
# (docs/kubernetes.md), later runs reuse it. kube-test installs the chart, runs
# `helm test` and the drills (test/kube/kube_test.go), prints the figures
# and tears down.
# ORION_KUBE_DRILLS=ci runs the reduced set; ORION_KUBE_TIMEOUT bounds it all.
kube-build:
	test/kube/cluster.sh build

kube-up:
	test/kube/cluster.sh up

kube-down:
	test/kube/cluster.sh down

kube-test: $(HELM)
	cd test/kube && out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	cd test/kube && $(GO) vet ./...
	HELM=$(HELM) test/kube/kube-test.sh

# --- Web console ----------------------------------------------------------------
console: $(CONSOLE_DIST)

$(CONSOLE_WEB)/node_modules/.package-lock.json: $(CONSOLE_WEB)/package.json $(CONSOLE_WEB)/package-lock.json
	cd $(CONSOLE_WEB) && $(NPM) ci --no-audit --no-fund

$(CONSOLE_DIST): $(CONSOLE_WEB)/node_modules/.package-lock.json $(CONSOLE_SRC)
	cd $(CONSOLE_WEB) && $(NPM) run build

# The API's contract: internal/http/openapi/openapi.json is generated from the
# Go wire types and the route table (internal/http/openapi/contract), the
# console's TypeScript types (src/api.gen.ts) from it. `make openapi`
# regenerates both; make test fails until they are in step (the document in
# test-unit, the TypeScript here).
openapi: $(CONSOLE_WEB)/node_modules/.package-lock.json
	$(GO) test -count=1 -run '^TestDocumentUpToDate$$' ./internal/http/openapi/contract -update
	cd $(CONSOLE_WEB) && $(NPM) run --silent gen

openapi-check: $(CONSOLE_WEB)/node_modules/.package-lock.json
	cd $(CONSOLE_WEB) && $(NPM) run --silent gen:check

# Browser tests of the console: the real binary and Debian's chromium
# (/usr/bin/chromium; CHROMIUM=... to use another), through playwright-core.
test-console: build
	cd test/console && $(NPM) ci --no-audit --no-fund && ORION_BIN=$(CURDIR)/$(BIN) $(NPM) test
