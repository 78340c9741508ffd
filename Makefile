# Patchbay — see README.md.
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
# Reference peers (installed by scripts/test-deps.sh, cached across runs).
REF_PLUGINS_VERSION ?= v1.9.1
CNITOOL_VERSION ?= v1.3.1
REF_BIN ?= $(HOME)/.cache/patchbay/ref-$(REF_PLUGINS_VERSION)
export PATCHBAY_BIN := $(BIN)
export PATCHBAY_REF_BIN := $(REF_BIN)
# A real etcd + kube-apiserver (internal/kubetest) and a real node
# (internal/nodetest): kube binaries built by scripts/kube-deps.sh, cached.
KUBE_VERSION ?= v1.32.13
export PATCHBAY_KUBE_BIN ?= $(HOME)/.cache/patchbay/kube-$(KUBE_VERSION)
export PATCHBAY_KUBE_APISERVER ?= $(PATCHBAY_KUBE_BIN)/kube-apiserver
# The product image's reference (default: internal/ociimage.ProductRef).
IMAGE ?=
# Debian's kernel + initramfs for the tests that run in a QEMU VM
# (internal/vmtest; scripts/vm-deps.sh).
export PATCHBAY_VM_DIR ?= $(HOME)/.cache/patchbay/vm/current

.PHONY: build image test test-deps demo bench vet clean

# Static binaries (CGO_ENABLED=0): no dynamic loader at start-up, which is
# measurable per plugin exec (about 0.5 ms here), and no libc dependency.
build: export CGO_ENABLED := 0
build:
	@mkdir -p $(BIN)
	$(GO) build -trimpath -ldflags='-s -w' -o $(BIN)/patchbay ./cmd/patchbay
	$(GO) build -trimpath -ldflags='-s -w' -o $(BIN)/patchbay-plugins ./cmd/plugins
	$(GO) build -trimpath -ldflags='-s -w' -o $(BIN)/multinet ./cmd/multinet
	$(GO) build -trimpath -ldflags='-s -w' -o $(BIN)/multinet-daemon ./cmd/multinet-daemon
	$(GO) build -trimpath -ldflags='-s -w' -o $(BIN)/multinet-shim ./cmd/multinet-shim
	@cd $(BIN) && for t in $$(./patchbay-plugins types); do ln -sf patchbay-plugins $$t; done
	@echo "built: $$(cd $(BIN) && ls | tr '\n' ' ')"

# bin/patchbay-image.tar: an OCI archive of bin/ for `ctr -n k8s.io images import`.
image: build
	$(GO) run ./cmd/patchbay-image -bin $(BIN) -out $(BIN)/patchbay-image.tar $(if $(IMAGE),-ref $(IMAGE))

test-deps:
	REF_BIN=$(REF_BIN) REF_PLUGINS_VERSION=$(REF_PLUGINS_VERSION) CNITOOL_VERSION=$(CNITOOL_VERSION) bash scripts/test-deps.sh
	KUBE_CACHE=$(PATCHBAY_KUBE_BIN) bash scripts/kube-deps.sh
	bash scripts/node-deps.sh
	bash scripts/vm-deps.sh

vet:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...

# All tests, as root: installs what they need first. Test binaries are
# static too (CGO_ENABLED=0): internal/vmtest re-runs them inside a VM, where
# a dynamically linked program starts slower.
test: test-deps build vet
	CGO_ENABLED=0 $(GO) test -count=1 -p 2 -timeout 30m ./...

demo: build
	bash scripts/demo.sh

# Benchmarks (as root): ours vs reference v1.9.1 vs Debian 1.1.1, interleaved,
# through our runtime; prints the table and writes bench/results.md.
# BENCH_N runs per workload (PATCHBAY_BENCH_N in the environment works too);
# BENCH_ARGS passes more flags (e.g. BENCH_ARGS='-only seed,bytes').
BENCH_N ?= $(or $(PATCHBAY_BENCH_N),20)
bench: test-deps build
	bash scripts/bench-deps.sh
	$(GO) run ./bench -n $(BENCH_N) -out bench/results.md $(BENCH_ARGS)

clean:
	rm -rf $(BIN)
