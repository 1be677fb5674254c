# migflex Makefile. The README's two commands are `make demo` and `make test`.
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
STATICCHECK_VERSION ?= v0.7.0

.PHONY: all build lint test test-unit demo clean

all: build

# The node agent links go-nvml (cgo); the webhook is static.
build:
	CGO_ENABLED=1 $(GO) build -trimpath -o $(BIN)/device-plugin ./cmd/device-plugin
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/webhook ./cmd/webhook

lint:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' ; git ls-files -o --exclude-standard '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@command -v staticcheck >/dev/null || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	PATH=$$PATH:$$($(GO) env GOPATH)/bin staticcheck ./...

# Unit tests: no root, no cluster.
test-unit:
	$(GO) test ./...

test: lint test-unit

clean:
	rm -rf $(BIN)
