# syncd: `make` lists the targets.
SHELL := /bin/bash
GO ?= go
export PATH := $(PATH):/usr/local/go/bin:$(shell $(GO) env GOPATH 2>/dev/null)/bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
CONFIG ?= config.yaml
FUZZTIME ?= 10s
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z/_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  \033[1m%-12s\033[0m %s\n", $$1, $$2}'

.PHONY: deps
deps: ## install what the tests need: Debian's redis-server, redis-tools and chromium (the browser tests)
	@if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null || ! command -v chromium >/dev/null; then \
		echo "installing redis-server, redis-tools and chromium (apt-get)"; \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools chromium >/dev/null; \
	fi
	@redis-server --version
	@chromium --version 2>/dev/null

.PHONY: build
build: ## build bin/syncd, version stamped (static)
	@echo "compiling bin/syncd: the first build takes several minutes on a 2-core machine, with no output until it ends"
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/syncd ./cmd/syncd

# A checkout under umask 002 leaves config.yaml group-writable, which
# syncd refuses: the checked-in file loses that bit; another CONFIG is
# left as it is.
.PHONY: run
run: build ## build and run syncd with config.yaml (embedded store, demo items; Ctrl-C stops)
	@[ "$(CONFIG)" != config.yaml ] || chmod go-w config.yaml
	./bin/syncd run -c $(CONFIG)

.PHONY: test
test: deps ## install what is needed, run every test with -race, then each fuzz target for 5s
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 20m ./...
	$(MAKE) --no-print-directory fuzz FUZZTIME=5s

.PHONY: test/race
test/race: test ## same as test: every test always runs with -race

.PHONY: bench
bench: deps ## run the benchmarks against the peers (own module in bench/) and write BENCHMARKS.md
	cd bench && $(GO) run ./cmd/benchall -out ../BENCHMARKS.md $(BENCHFLAGS)

.PHONY: screenshots
screenshots: deps ## rerun the browser tests and refresh the README's pictures in tests/web/screenshots
	SYNCD_SCREENSHOTS=1 $(GO) test -count=1 -run TestPage ./tests/web/

.PHONY: bench/quick
bench/quick: deps ## a one-minute smoke run of the benchmarks (BENCHMARKS.quick.md)
	cd bench && $(GO) run ./cmd/benchall -quick -out ../BENCHMARKS.quick.md

# staticcheck runs pinned with `go run pkg@version`, so the library's
# go.mod carries no tool dependencies. 2026.2.2 supports Go 1.26 and 1.27.
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK := $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

.PHONY: lint
lint: ## go vet, gofmt and staticcheck, over the module and bench/
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(STATICCHECK) ./...
	cd bench && $(STATICCHECK) ./...

.PHONY: fuzz
# Go 1.26's fuzz coordinator can fail a target with a bare "context
# deadline exceeded" as -fuzztime ends on a busy machine (golang/go#75804,
# fixed in Go 1.27). Such a run wrote no failing input; it is run once
# more. Any other failure, or one that wrote an input, fails at once.
fuzz: ## run every fuzz target for FUZZTIME (default 10s) each
	@for pkg in $$(grep -rl --include='*_test.go' --exclude-dir=bench '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
		for f in $$(grep -h '^func Fuzz' $$pkg/*_test.go | sed 's/func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
			echo "== $$pkg $$f"; \
			out=$$($(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 5s $$pkg 2>&1); rc=$$?; echo "$$out"; \
			if [ $$rc -ne 0 ]; then \
				if echo "$$out" | grep -q 'Failing input written to' || ! echo "$$out" | grep -q '^    context deadline exceeded$$'; then exit 1; fi; \
				echo "== $$pkg $$f again: the fuzztime deadline race of Go 1.26 (golang/go#75804), no failing input written"; \
				$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 5s $$pkg || exit 1; \
			fi; \
		done; \
	done

.PHONY: cover
cover: deps ## run the tests with coverage and print the total
	$(GO) test -race -count=1 -coverprofile=coverage.out ./...
	$(GO) tool cover -func=coverage.out | tail -1
