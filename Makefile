# converge — one Makefile for the go.work monorepo. Targets loop over every module.
# `make help` lists them.

MODULES   := gen platform services/registry services/knowledge services/verifier services/scheduler services/agent cmd/converge tools bench/registry bench/knowledge bench/dag bench/report faults bench/load deploy security
TOOLS_DIR ?= $(CURDIR)/.tools
TOOLS_BIN := $(TOOLS_DIR)/bin
export PATH := $(TOOLS_BIN):$(PATH)

# Pinned tool versions (installed with `go install`, cached in $(TOOLS_DIR), which git ignores).
BUF_VERSION                := v1.75.0
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
GRPCURL_VERSION            := v1.9.4
GOLANGCI_LINT_VERSION      := v2.15.0
TOOL_STAMPS := $(TOOLS_DIR)/stamps/buf@$(BUF_VERSION) $(TOOLS_DIR)/stamps/protoc-gen-go@$(PROTOC_GEN_GO_VERSION) \
               $(TOOLS_DIR)/stamps/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION) $(TOOLS_DIR)/stamps/grpcurl@$(GRPCURL_VERSION) \
               $(TOOLS_DIR)/stamps/golangci-lint@$(GOLANGCI_LINT_VERSION)

GO_TEST_FLAGS ?= -race -count=1 -timeout 30m
LISTEN        ?= 127.0.0.1:7070
DASHBOARD     ?= 127.0.0.1:7080
SHOTS_DIR     ?= docs/dashboard

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: tools
tools: $(TOOL_STAMPS) ## Install pinned buf, protoc plugins and grpcurl into $(TOOLS_DIR)/bin (once per version).

# A stamp per tool and version: bumping a version above reinstalls just that tool.
$(TOOLS_DIR)/stamps/buf@%:
	GOBIN=$(TOOLS_BIN) go install github.com/bufbuild/buf/cmd/buf@$*
	@mkdir -p $(@D) && touch $@
$(TOOLS_DIR)/stamps/protoc-gen-go@%:
	GOBIN=$(TOOLS_BIN) go install google.golang.org/protobuf/cmd/protoc-gen-go@$*
	@mkdir -p $(@D) && touch $@
$(TOOLS_DIR)/stamps/protoc-gen-go-grpc@%:
	GOBIN=$(TOOLS_BIN) go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$*
	@mkdir -p $(@D) && touch $@
$(TOOLS_DIR)/stamps/grpcurl@%:
	GOBIN=$(TOOLS_BIN) go install github.com/fullstorydev/grpcurl/cmd/grpcurl@$*
	@mkdir -p $(@D) && touch $@
$(TOOLS_DIR)/stamps/golangci-lint@%:
	GOBIN=$(TOOLS_BIN) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$*
	@mkdir -p $(@D) && touch $@

.PHONY: validate-proto
validate-proto: ## Regenerate proto/buf/validate/validate.proto from the protovalidate Go module.
	cd tools && go run ./protovalidate-export -out ../proto/buf/validate/validate.proto

.PHONY: generate
generate: tools validate-proto ## Regenerate gen/ (Go code and the descriptor image with comments) from proto/.
	rm -rf gen/converge
	buf generate --template buf.gen.yaml
	buf build --as-file-descriptor-set -o gen/converge.binpb

.PHONY: breaking
breaking: tools ## buf breaking (WIRE_JSON) against buf/baseline.binpb, the contracts as last released.
	buf breaking --against buf/baseline.binpb

.PHONY: breaking-baseline
breaking-baseline: tools ## Accept the current contracts as the new baseline (only for a deliberate, announced break).
	buf build -o buf/baseline.binpb

.PHONY: check-generated
check-generated: generate ## Fail when regenerating changes gen/ or proto/buf (CI).
	@git diff --exit-code --stat -- gen proto/buf || { echo "gen/ is stale: run make generate and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- gen proto/buf)" || { git status --porcelain -- gen proto/buf; echo "gen/ has untracked files: run make generate and commit"; exit 1; }

.PHONY: lint
lint: tools ## buf lint, gofmt, go vet and golangci-lint (.golangci.yml) over every module.
	buf lint
	@out=$$(gofmt -l $(MODULES)); test -z "$$out" || { echo "gofmt needed:"; echo "$$out"; exit 1; }
	@for m in $(MODULES); do echo "go vet + golangci-lint $$m"; (cd $$m && go vet ./... && golangci-lint run --config $(CURDIR)/.golangci.yml ./...) || exit 1; done

.PHONY: test
test: tools ## Run every module's tests with -race (needs Postgres and Redis; see README).
	@for m in $(MODULES); do echo "== go test $$m"; (cd $$m && go test $(GO_TEST_FLAGS) ./...) || exit 1; done

# make unit runs these modules with -short, Postgres and Redis pointed at a closed port: a test that
# needs either skips through dbtest.SkipUnit, and one that reaches for them anyway fails here.
# faults/ and bench/ start real clusters and are left out.
UNIT_MODULES := gen platform services/registry services/knowledge services/verifier services/scheduler services/agent cmd/converge tools deploy
UNIT_ENV     := CONVERGE_TEST_POSTGRES_URL=postgres://unit@127.0.0.1:1/none?sslmode=disable CONVERGE_TEST_REDIS_URL=redis://127.0.0.1:1/0

.PHONY: unit
unit: tools ## Tests that need neither Postgres nor Redis (go test -short; no -race): a machine with Go and git is enough.
	@failed=""; for m in $(UNIT_MODULES); do echo "== go test -short $$m"; (cd $$m && $(UNIT_ENV) go test -short -count=1 ./...) || failed="$$failed $$m"; done; \
	test -z "$$failed" || { echo "make unit failed in:$$failed"; exit 1; }

.PHONY: build
build: ## Build the converge CLI, the five service binaries and the sandbox's init (converge-sandbox-init, found beside them) into bin/.
	@mkdir -p bin
	cd cmd/converge && go build -o ../../bin/converge .
	cd platform && go build -o ../bin/converge-sandbox-init ./proc/cmd/converge-sandbox-init
	@for s in scheduler agent verifier knowledge registry; do (cd services/$$s && go build -o ../../bin/converge-$$s ./cmd/converge-$$s) || exit 1; done

.PHONY: dev
dev: ## Run all five services in one process on $(LISTEN) (embedded SQLite under ./.converge), the dashboard on http://$(DASHBOARD)/.
	cd cmd/converge && go run . dev --listen $(LISTEN) --data-dir $(CURDIR)/.converge --dashboard $(DASHBOARD)

.PHONY: dashboard-shots
dashboard-shots: ## Screenshots of the web dashboard (runs, run view, task, verify report with a sign-off, agents, phone width) from its browser test into $(SHOTS_DIR)/ (needs Chromium).
	@mkdir -p $(SHOTS_DIR)
	cd cmd/converge/dashboard && CONVERGE_DASHBOARD_SHOTS=$(abspath $(SHOTS_DIR)) go test -count=1 -run TestBrowser -v .
	@ls -l $(SHOTS_DIR)

.PHONY: example
example: ## Build the greeter example (examples/greeter) with 3 local agents in a fresh git copy under .converge/example/.
	sh examples/greeter/run.sh

.PHONY: bench
bench: ## Run every benchmark side by side with its peer (ninja, make, redis-benchmark, topo sort) and rewrite bench/RESULTS.md.
	sh bench/run.sh

.PHONY: bench-growth
bench-growth: ## The growth benchmark alone: the fan-out at 100 … 100,000 tasks (FANOUT_SIZES), embedded and Postgres, cost and memory per task.
	sh bench/run.sh growth

.PHONY: faults
faults: ## Fault suite against the real binaries, Postgres and Redis (full size); prints its table.
	sh faults/run.sh full

.PHONY: faults-ci
faults-ci: ## The reduced fault suite CI runs: every scenario on a smaller run.
	sh faults/run.sh ci

.PHONY: load
load: ## Load test: 1,000 WatchExecution streams and 50 agents on one run; reports scheduler memory.
	sh bench/load/run.sh

.PHONY: tidy
tidy: ## go mod tidy in every module (-e: a test-only dependency of modernc.org/sqlite is not on the proxy).
	@for m in $(MODULES); do (cd $$m && go mod tidy -e) || exit 1; done

.PHONY: images
images: ## Build the six container images (localhost/converge-*:dev) with podman, no registry needed (deploy/images/build.sh).
	sh deploy/images/build.sh

.PHONY: infra-images
infra-images: ## Postgres and Redis images for deploy/compose from Debian packages (localhost/converge-dev-*), for a host with no registry.
	sh deploy/images/build-infra.sh

.PHONY: deploy-smoke
deploy-smoke: ## Images + the greeter example through the containerised services (podman, host Postgres and Redis); clean drain; then docs/deploy.md's Compose steps, run as written (podman-compose).
	sh deploy/smoke.sh
	cd deploy && CONVERGE_COMPOSE_TEST=1 go test -count=1 -run TestComposeAsDocumented -v -timeout 30m .
