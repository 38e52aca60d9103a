# orderflow — make is the entry point. `make` alone lists the targets.

SHELL := /bin/bash
.DEFAULT_GOAL := help

BIN      := $(CURDIR)/bin
export PATH := $(BIN):$(PATH)

# Pinned tool versions.
BUF_VERSION             := v1.75.0
PROTOC_GEN_GO_VERSION   := v1.36.12
PROTOC_GEN_GRPC_VERSION := v1.6.0
GRPC_GATEWAY_VERSION    := v2.34.0
STATICCHECK_VERSION     := v0.8.2
HELM_VERSION            := v3.22.0

# Every module of the workspace; `./...` does not cross module boundaries.
MODULE_DIRS = $(shell go list -f '{{.Dir}}' -m)
PKGS        = $(addsuffix /...,$(MODULE_DIRS))

SERVICES := gateway splitworker reconciler paysim fulfilmentsim

.PHONY: help
help: ## List the targets.
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

$(BIN)/buf:
	GOBIN=$(BIN) go install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
$(BIN)/protoc-gen-go:
	GOBIN=$(BIN) go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(BIN)/protoc-gen-go-grpc:
	GOBIN=$(BIN) go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GRPC_VERSION)
$(BIN)/protoc-gen-grpc-gateway:
	GOBIN=$(BIN) go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@$(GRPC_GATEWAY_VERSION)
$(BIN)/protoc-gen-openapiv2:
	GOBIN=$(BIN) go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2@$(GRPC_GATEWAY_VERSION)
$(BIN)/staticcheck:
	GOBIN=$(BIN) go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
# helm's own build stamps its version and the Kubernetes version it assumes
# without a cluster (that of its client-go, 1.37 for v3.22); a plain go
# install leaves 1.20, which the chart's kubeVersion refuses.
HELM_LDFLAGS := -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37 \
	-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37
$(BIN)/helm:
	GOBIN=$(BIN) go install -ldflags '$(HELM_LDFLAGS)' helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

GEN_TOOLS := $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc $(BIN)/protoc-gen-grpc-gateway $(BIN)/protoc-gen-openapiv2
TOOLS     := $(GEN_TOOLS) $(BIN)/staticcheck $(BIN)/helm

.PHONY: tools
tools: $(TOOLS) ## Install the pinned tools into ./bin.

.PHONY: generate
generate: $(GEN_TOOLS) ## Regenerate Go code and OpenAPI from proto/.
	rm -rf pkg/gen services/gateway/internal/openapi/orderflow.swagger.json
	buf generate

.PHONY: generate-check
generate-check: generate ## Fail when the committed generated code differs from `make generate`.
	@git diff --exit-code -- pkg/gen services/gateway/internal/openapi || { echo "generated code drifted: run 'make generate' and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- pkg/gen services/gateway/internal/openapi)" || { echo "untracked generated files"; git status --porcelain -- pkg/gen; exit 1; }

.PHONY: lint
lint: $(BIN)/buf $(BIN)/staticcheck ## go vet, staticcheck, gofmt, buf lint, one version per dependency and no test-only module in a runtime module (modversions), the OpenAPI document (Redocly), no function over 80 lines (funclen) and the commit messages (commitlint).
	buf lint
	@fmt=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^pkg/gen/')); test -z "$$fmt" || { echo "gofmt needed:"; echo "$$fmt"; exit 1; }
	go vet $(PKGS)
	staticcheck $(PKGS)
	go run ./pkg/testkit/modversions/cmd/modversions
	go run ./pkg/testkit/funclen/cmd/funclen
	$(MAKE) --no-print-directory openapi-lint
	$(MAKE) --no-print-directory commitlint

# The OpenAPI 3.1 document the gateway serves, linted by Redocly CLI
# (pinned by the lock file beside its package.json, installed with npm ci
# when the installed copy is not the locked version) with its recommended
# rules, every warning an error.
OPENAPI_LINT := services/gateway/internal/openapi/lint
.PHONY: openapi-lint
openapi-lint: ## Lint the served OpenAPI 3.1 document with Redocly (part of make lint).
	@bash deploy/local/ensure-commands.sh node=nodejs npm=npm
	@mkdir -p .cache
	go run ./services/gateway/internal/openapi/cmd/openapidoc > .cache/openapi.json
	@cd $(OPENAPI_LINT) && want=$$(node -p 'require("./package-lock.json").packages["node_modules/@redocly/cli"].version') && \
		have=$$(node -p 'require("./node_modules/@redocly/cli/package.json").version' 2>/dev/null || true) && \
		{ [ "$$want" = "$$have" ] || npm ci --no-audit --no-fund --prefer-offline; }
	cd $(OPENAPI_LINT) && REDOCLY_TELEMETRY=off npx --no-install redocly lint --config redocly.yaml $(CURDIR)/.cache/openapi.json

# The commits after COMMITLINT_BASE (main when the check was switched on)
# to the message form: subject at most 72 characters, no trailing period,
# a blank line before the body. Merge commits are skipped.
COMMITLINT_BASE ?= d7cfd91
.PHONY: commitlint
commitlint: ## Check the messages of the commits after COMMITLINT_BASE (part of make lint).
	go run ./pkg/testkit/commitlint/cmd/commitlint -base $(COMMITLINT_BASE)

# Each module's direct requirements (its go.mod, not the replaced
# workspace modules) that the module proxy has a newer release of, listed
# once; information, never a failure.
.PHONY: deps-outdated
deps-outdated: ## List the direct dependencies behind their latest release (go list -m -u; information only, exits 0).
	@for d in $(MODULE_DIRS); do \
		(cd $$d && GOWORK=off go list -m -u -f '{{if .Update}}{{.Path}} {{.Version}} -> {{.Update.Version}}{{end}}' \
			$$(GOWORK=off go list -m -f '{{if not (or .Main .Indirect .Replace)}}{{.Path}}{{end}}' all)) || true; \
	done | sort -u | awk 'BEGIN { n = 0 } NF { print "  " $$0; n++ } END { printf "%d direct dependencies behind their latest release\n", n }'

.PHONY: breaking
breaking: $(BIN)/buf ## Check proto/ for breaking changes against main.
	buf breaking --against '.git#branch=main'

.PHONY: deps
deps: ## Make sure Redis and RabbitMQ (what `make run` needs) are there; start them if not.
	bash deploy/local/ensure-deps.sh

.PHONY: test-deps
test-deps: deps ## deps, and what the tests add: Chromium (browser tests), promtool (alert tests), iptables (fault suite), Node.js and npm (SDK interop).
	bash deploy/local/ensure-test-deps.sh

.PHONY: build
build: ## Build every service into ./bin.
	@for s in $(SERVICES); do \
		if [ -d services/$$s/cmd/$$s ]; then go build -o $(BIN)/$$s ./services/$$s/cmd/$$s || exit 1; fi; \
	done

# The fault suite's short rows run in three lanes side by side, each with
# a Redis and a RabbitMQ node of its own (ORDERFLOW_CHAOS_LANES, 1 runs
# them one after another, about 10 minutes on a quiet 2-core machine);
# 30m still ends a hang. TEST_P packages run at once (go test -p; its
# default, the number of cores, leaves one slot to the fault suite and the
# other packages in a line behind one another, though most of their time
# is spent waiting on servers they start). go test -json goes to
# .cache/test.json; testreport prints what go test would (failures, one
# line per package) and then the ten slowest packages.
TESTREPORT := go run ./pkg/testkit/testreport/cmd/testreport
TEST_P ?= 4
# The longest packages go first (go test starts packages in the order
# given), so that none of them starts last and runs on alone.
TEST_FIRST := ./pkg/testkit/chaos ./services/gateway/browser ./deploy/helm/chartcheck ./pkg/engine/amqpbus
.PHONY: test
test: test-deps tools ## Unit and integration tests (race detector; a test whose file says !race without it), the fault suite in short and short fuzz runs; prints the ten slowest packages.
	@mkdir -p .cache
	set -o pipefail; go test -race -p $(TEST_P) -count=1 -timeout 30m -json $(TEST_FIRST) $(PKGS) | $(TESTREPORT) -out .cache/test.json -slowest 10
	go test -count=1 -run '$(NORACE_TESTS)' ./services/gateway/browser
	$(MAKE) --no-print-directory fuzz FUZZTIME=3s

# Tests built without the race detector (their files say !race): work in
# one goroutine, where the detector finds nothing and costs twelvefold.
NORACE_TESTS := ^TestQRCodesOfRealLinksAllDecode$$

# Fuzz targets as package:target; `go test -fuzz` takes one of each per run.
FUZZ_TARGETS := ./pkg/engine/jobqueue:FuzzDecode \
	./services/gateway/internal/tasks:FuzzSplitBody \
	./pkg/provider/wechatpay:FuzzVerifyNotification
FUZZTIME ?= 30s

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (30s); `make test` runs them for 3s.
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$name ($$pkg) for $(FUZZTIME)"; \
		go test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	done

.PHONY: chaos
chaos: test-deps ## The full fault suite (own Redis and RabbitMQ node, and the make partition rows; about 30 minutes); prints one row per fault.
	ORDERFLOW_CHAOS=full go test -v -run Chaos -count=1 -timeout 50m ./pkg/testkit/chaos/

# Benchmarks record their figures (pkg/testkit/benchrec) into
# bench/figures.jsonl; benchreport turns them into bench/latest.json,
# bench/report.html and the printed table, with the reasons and next
# levers of goals not met from bench/levers.json.
BENCH_FIGURES := $(CURDIR)/bench/figures.jsonl
BENCHREPORT   := go run ./pkg/testkit/benchrec/cmd/benchreport
# The pinned pass: these benchmarks run with the load generator on the
# first CPU list and the server under test (and its baseline) on the
# second.
BENCH_PIN         ?= 0:1
BENCH_ROUNDS      ?= 5
# make bench: the issue-level cells, each repeated BENCH_ROUNDS times.
BENCH_E2E         := ^Benchmark(PickupOwnProcess|SubmitToTerminal)$$
BENCH_ENGINES     := ^Benchmark(Pool|DelayQueue)$$
BENCH_WORKER      := ^Benchmark(Pickup|Flood|NoisyNeighbour)$$
BENCH_PINNED_APP  := ^Benchmark(Submit|Status)$$
BENCH_PINNED_E2E  := ^BenchmarkSaturation$$
BENCH_RUN          = ORDERFLOW_BENCH_OUT=$(BENCH_FIGURES) ORDERFLOW_BENCH_ROUNDS=$(BENCH_ROUNDS) go test -run '^$$' -benchtime 1x -timeout 20m

.PHONY: partition
partition: test-deps ## Faults on replicated engines (Redis Sentinel failovers and split brain, a 3-master Redis Cluster's master failed over, killed or partitioned, a 3-node RabbitMQ cluster's leader killed or partitioned, processes cut from one engine, a slow lossy Redis (200 ms and 5 % packet loss by iptables statistic DROP and an NFQUEUE queue the suite reads, as this kernel has no netem), skewed clocks; every node and service instance a network namespace of its own on a bridge the suite makes, partitions by iptables inside those namespaces; about 16 minutes); prints one row per fault.
	ORDERFLOW_CHAOS=partition go test -v -run Chaos -count=1 -timeout 60m ./pkg/testkit/chaos/

.PHONY: bench
bench: deps tools ## The issue-level benchmarks, each cell in BENCH_ROUNDS (5) rounds: what an order costs, saturation and submit/status pinned beside their baselines, pickup at 500/s, the slot pool, the delay queue (7 to 9 minutes); writes bench/latest.json, bench/report.html and docs/benchmarks.md.
	@mkdir -p bench && rm -f $(BENCH_FIGURES)
	@echo "what one order costs (counts, not timings; budget in bench/cost-budget.json):"
	ORDERFLOW_BENCH_OUT=$(BENCH_FIGURES) go test -count=1 -run '^TestOrderCost$$' ./services/gateway/internal/e2e
	$(BENCH_RUN) -bench '$(BENCH_E2E)' ./services/gateway/internal/e2e
	$(BENCH_RUN) -bench '$(BENCH_ENGINES)' ./pkg/engine/slotpool ./pkg/engine/delayq
	$(BENCH_RUN) -bench '$(BENCH_WORKER)' ./services/splitworker/internal/worker
	@echo "pinned pass: load generator on CPU $(word 1,$(subst :, ,$(BENCH_PIN))), server (orderflow or its baseline) on CPU $(word 2,$(subst :, ,$(BENCH_PIN))) (taskset):"
	ORDERFLOW_BENCH_PIN=$(BENCH_PIN) $(BENCH_RUN) -bench '$(BENCH_PINNED_APP)' ./services/gateway/internal/app
	ORDERFLOW_BENCH_PIN=$(BENCH_PIN) $(BENCH_RUN) -bench '$(BENCH_PINNED_E2E)' ./services/gateway/internal/e2e
	$(BENCHREPORT) build -in $(BENCH_FIGURES) -dir bench -pin $(BENCH_PIN) -levers bench/levers.json
	$(BENCHREPORT) docs -json bench/latest.json -levers bench/levers.json -out docs/benchmarks.md

.PHONY: bench-quick
bench-quick: deps ## What one order costs (Redis round trips, commands, scripts, bytes, RabbitMQ publishes and acks, fulfilment calls, beside the budget) and one round of each ratio: saturation, submit and status pinned, the slot pool (about a minute); prints only.
	go test -count=1 -v -run '^TestOrderCost$$' ./services/gateway/internal/e2e | grep -E 'cost_test.go:[0-9]+: [0-9a-z-]+/|^(--- |ok|FAIL)'
	ORDERFLOW_BENCH_ROUNDS=1 go test -run '^$$' -bench '^BenchmarkPool$$' -benchtime 1x ./pkg/engine/slotpool | grep -E '^  |^(ok|FAIL)'
	ORDERFLOW_BENCH_ROUNDS=1 ORDERFLOW_BENCH_PIN=$(BENCH_PIN) go test -run '^$$' -bench '$(BENCH_PINNED_E2E)' -benchtime 1x ./services/gateway/internal/e2e | grep -E '^  |^(ok|FAIL)'
	ORDERFLOW_BENCH_ROUNDS=1 ORDERFLOW_BENCH_PIN=$(BENCH_PIN) go test -run '^$$' -bench '$(BENCH_PINNED_APP)' -benchtime 1x ./services/gateway/internal/app | grep -E '^  |^(ok|FAIL)'

.PHONY: bench-long
bench-long: deps tools ## make bench, then the long sweeps: cost curves to 10^6, polling and cluster capacity, quorum queues, submit/status unpinned, two reconciler replicas with 10,000 orders (about 25 minutes); one report of all.
	@mkdir -p bench && rm -f $(BENCH_FIGURES)
	ORDERFLOW_BENCH_OUT=$(BENCH_FIGURES) go test -count=1 -run '^TestOrderCost$$' ./services/gateway/internal/e2e
	ORDERFLOW_BENCH_OUT=$(BENCH_FIGURES) ORDERFLOW_BENCH_ROUNDS=$(BENCH_ROUNDS) go test -run '^$$' -bench . -benchtime 1x -timeout 60m $(PKGS)
	ORDERFLOW_BENCH_PIN=$(BENCH_PIN) $(BENCH_RUN) -bench '^Benchmark(Submit|Status|PollingCapacity)$$' ./services/gateway/internal/app
	ORDERFLOW_BENCH_PIN=$(BENCH_PIN) $(BENCH_RUN) -bench '$(BENCH_PINNED_E2E)' ./services/gateway/internal/e2e
	@echo "two reconciler replicas, 10,000 orders on a compressed schedule (make test runs 500):"
	ORDERFLOW_BENCH_OUT=$(BENCH_FIGURES) ORDERFLOW_RECONCILE_TEST_ORDERS=10000 go test -count=1 -v -run 'TestTwoReplicasFireEachCheckOnce' -timeout 10m ./services/reconciler/internal/app | grep -E 'replicas_test|^(--- |ok|FAIL)'
	$(BENCHREPORT) build -in $(BENCH_FIGURES) -dir bench -pin $(BENCH_PIN) -levers bench/levers.json
	$(BENCHREPORT) docs -json bench/latest.json -levers bench/levers.json -out docs/benchmarks.md

.PHONY: bench-quorum
bench-quorum: deps ## Only BenchmarkQuorumQueue (part of make bench-long, 40–60 s): one split queue vs 4 on a 3-node RabbitMQ cluster of its own; prints rates, confirm latency and each node's CPU per 1,000 messages.
	go test -run '^$$' -bench '^BenchmarkQuorumQueue$$' -benchtime 1x -timeout 10m ./pkg/engine/amqpbus/

.PHONY: bench-docs
bench-docs: ## Rewrite docs/benchmarks.md from bench/latest.json and bench/levers.json.
	$(BENCHREPORT) docs -json bench/latest.json -levers bench/levers.json -out docs/benchmarks.md

OLD ?= bench/latest.json
NEW ?= bench/latest.json
.PHONY: bench-compare
bench-compare: ## Compare two runs, e.g. make bench-compare OLD=/tmp/before.json NEW=bench/latest.json (noise stated).
	$(BENCHREPORT) compare $(OLD) $(NEW)

.PHONY: docs
docs: ## Regenerate the generated pages: docs/configuration.md (config structs), docs/benchmarks.md (bench/latest.json), the fault results in docs/reliability.md.
	go run ./pkg/platform/config/configdoc/cmd/configdoc
	$(BENCHREPORT) docs -json bench/latest.json -levers bench/levers.json -out docs/benchmarks.md
	go run ./pkg/testkit/chaos/faultreport/cmd/faultreport

.PHONY: run
run: deps build ## Start all five processes in the foreground (Ctrl-C stops them).
	bash deploy/local/run.sh

IMAGE_REPO ?= orderflow
VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: images
images: ## One OCI image per service from static binaries and a local base (Docker, or podman when Docker is absent); prints sizes.
	IMAGE_REPO=$(IMAGE_REPO) VERSION=$(VERSION) bash deploy/images/build.sh

.PHONY: kube-smoke
kube-smoke: $(BIN)/helm ## Images (IMAGES_BUILT=1: those make images built), the chart started with podman kube play (local profile) and a smoke through its pods; always tears down.
	bash deploy/local/ensure-deps.sh
	bash deploy/local/ensure-podman.sh
	test -n "$(IMAGES_BUILT)" || IMAGE_REPO=orderflow VERSION=$(VERSION) bash deploy/images/build.sh
	cd deploy/helm/chartcheck && go run ./cmd/kubesmoke -root $(CURDIR) -tag $(VERSION)

.PHONY: chart-readme
chart-readme: ## Regenerate the value tables of deploy/helm/orderflow/README.md from values.yaml.
	cd deploy/helm/chartcheck && go run ./cmd/chartreadme -chart $(CURDIR)/deploy/helm/orderflow

WEB_THIRDPARTY := services/gateway/internal/web/thirdparty
WEB_LIB := services/gateway/internal/web/static/lib

.PHONY: web-vendor
web-vendor: ## Vendor the pages' pinned browser libraries (uPlot) from the npm registry into static/lib.
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	cp $(WEB_THIRDPARTY)/package.json $(WEB_THIRDPARTY)/package-lock.json "$$tmp" && \
	(cd "$$tmp" && npm ci --ignore-scripts --no-audit --no-fund --silent) && \
	rm -rf $(WEB_LIB)/uplot && mkdir -p $(WEB_LIB)/uplot && \
	cp "$$tmp"/node_modules/uplot/LICENSE "$$tmp"/node_modules/uplot/dist/uPlot.iife.min.js "$$tmp"/node_modules/uplot/dist/uPlot.min.css $(WEB_LIB)/uplot/

.PHONY: web-vendor-check
web-vendor-check: web-vendor ## Fail when static/lib differs from the pinned packages' files.
	@git diff --exit-code -- $(WEB_LIB) || { echo "vendored browser libraries drifted: run 'make web-vendor' and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- $(WEB_LIB))" || { echo "untracked vendored files"; git status --porcelain -- $(WEB_LIB); exit 1; }

.PHONY: helm-lint
helm-lint: $(BIN)/helm ## Lint and render the chart; decode every object strictly; check custom resources against their CRD schemas, Chart.yaml's metadata, and the Dockerfiles (base images pinned by digest).
	cd deploy/helm/chartcheck && HELM=$(BIN)/helm go test -count=1 ./...

.PHONY: crd-schemas
crd-schemas: ## Rewrite the custom resources' JSON schemas helm-lint checks against, from the pinned CRDs (Go module proxy).
	cd deploy/helm/chartcheck && go run ./cmd/crdschemas

.PHONY: clean
clean: ## Remove ./bin.
	rm -rf $(BIN)
