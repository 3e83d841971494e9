# npu-stack: see README.md. Every target is runnable from a fresh clone.
SHELL := /usr/bin/env bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# -s -w: no symbol table or DWARF (stack traces keep function names and
# lines): an idle npu-rebooter maps 1.4 MiB less of its executable.
LDFLAGS := -s -w -X github.com/openfuyao/npu-stack/internal/buildinfo.Version=$(VERSION)
BINARIES := npu-hooks npu-rebooter npu-healthwatch
BIN_DIR ?= bin
CP_DIR ?= $(CURDIR)/.cache/controlplane
export NPU_STACK_CP_DIR := $(CP_DIR)
ENGINES_DIR ?= $(CURDIR)/.cache/engines
export NPU_STACK_ENGINES_DIR := $(ENGINES_DIR)
NODES_DIR ?= $(CURDIR)/.cache/nodes
export NPU_STACK_NODES_DIR := $(NODES_DIR)
# Integration packages start a control plane each and spend most of their
# time waiting for simulated reboots and timeouts, not on the CPU: three at
# a time fit 2 cores and 24 GiB. `go test` starts packages in the order
# it is given them, so the packages of 2 minutes or more go first, longest
# first (tests/e2e and tests/rollout, about 23 and 19 minutes), and the
# short ones fill in behind them; otherwise a package that starts last
# sets the suite's time.
# -timeout bounds each package's test binary from its start, and the
# packages that drive the deployers (tests/e2e, tests/docs) wait inside it
# for their cold background build: 91 min in a clean root while other
# work loaded the machine, before tests/e2e's own 40 min. 90m failed that
# run with every test sound; 150m leaves the hang detection to each
# test's own deadlines (CI's hard limit is 90 min for everything anyway).
TEST_FLAGS ?= -count=1 -p 3 -timeout 150m
TEST_FIRST := ./tests/e2e/ ./tests/rollout/ ./tests/reboot/ ./tests/docs/ ./tests/realnode/ ./tests/release/ ./tests/health/ ./tests/testbed/

.PHONY: all build check test unit fuzz bench lint controlplane engines nodes demo cluster cluster-down clean help images chart release

all: build

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

# Static binaries (CGO_ENABLED=0): npu-healthwatch is copied into the
# vendor's driver image (install-binary) and must run on whatever libc that
# image has (a cgo build needs glibc >= 2.34), and a static node agent maps
# no libc: 1 to 1.5 MiB less resident memory each.
# GOTAGS=simhost links in the simulated host (internal/host/agenthost): the
# test bed builds the binaries of its process nodes so. A release (make
# images) never takes GOTAGS.
GOTAGS ?=
build: ## build the three binaries into bin/ (BIN_DIR)
	CGO_ENABLED=0 $(GO) build -trimpath $(if $(GOTAGS),-tags $(GOTAGS)) -ldflags "$(LDFLAGS)" -o $(BIN_DIR)/ $(addprefix ./cmd/,$(BINARIES))

# Release artifacts (docs/releasing.md), no Docker daemon: `make images` builds
# the three binaries per platform, exactly as `make build` does, then one
# multi-arch OCI image per binary; `make chart` packages the chart. Both are
# reproducible (-trimpath, fixed timestamps): the same commit and VERSION give
# the same digests. REGISTRY=host[:port]/path pushes (credentials from
# ~/.docker/config.json or Helm's registry login; PLAIN_HTTP=1 for a registry
# without TLS, implied for localhost/127.0.0.1); without it, OCI layouts land
# in IMAGES_OUT and the .tgz in CHART_OUT.
REGISTRY ?=
PLAIN_HTTP ?=
RELEASE_DIR ?= .cache/release
IMAGES_OUT ?= .cache/images
CHART_OUT ?= .cache/chart
RELEASE_ARCHES := amd64 arm64
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
SOURCE_URL := https://github.com/openfuyao/npu-stack
RELEASE_FLAGS = --version $(VERSION) $(if $(REGISTRY),--registry $(REGISTRY)) $(if $(PLAIN_HTTP),--plain-http)

images: ## build linux/amd64+arm64 binaries and their OCI images; push to REGISTRY=host[:port]/path, else OCI layouts in .cache/images
	for arch in $(RELEASE_ARCHES); do \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(RELEASE_DIR)/bin/$$arch/ $(addprefix ./cmd/,$(BINARIES)) || exit 1; \
	done
	$(GO) run ./tools/npu-release images --bin-dir $(RELEASE_DIR)/bin --revision $(REVISION) --source $(SOURCE_URL) --out $(IMAGES_OUT) $(RELEASE_FLAGS)

# IMAGES_REPO: where the chart's default images point (host[:port]/path,
# images at <path>/<binary>); empty keeps values.yaml's (ghcr.io/openfuyao/npu-stack).
IMAGES_REPO ?=
chart: ## package the chart reproducibly into .cache/chart/ (version = VERSION); push to oci://REGISTRY when set
	$(GO) run ./tools/npu-release chart --chart charts/npu-stack --out $(CHART_OUT) $(if $(IMAGES_REPO),--images-repo $(IMAGES_REPO)) $(RELEASE_FLAGS)

# One version for everything: `make release VERSION=x.y.z` builds the
# images (tag x.y.z), the chart (version and appVersion x.y.z, its default
# image tags = appVersion, so the images of this run), the npu-hooks
# tarballs per OS/arch and SHA256SUMS over the chart and tarballs, all in
# DIST. REGISTRY=host[:port]/path pushes the images to <REGISTRY>/npu-stack/
# and the chart to oci://<REGISTRY>/charts, the chart's default images
# pointing at that registry (REGISTRY=ghcr.io/openfuyao is the layout the
# chart's values.yaml names). VERSION must be SemVer and what Chart.yaml
# carries as version and appVersion (bump them, and the documented
# --version pins, first): the chart of the release's tag then pulls the
# release's images. Builds of untagged commits are make images / make
# chart pre-releases (0.0.0-<describe>): helm installs those only with
# --devel or their exact --version.
DIST ?= $(RELEASE_DIR)/dist
HOOKS_PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
release: ## VERSION=x.y.z [REGISTRY=host/path]: images, chart, npu-hooks tarballs and SHA256SUMS of one version (in .cache/release/dist)
	@case "$(origin VERSION)" in "command line"|environment) ;; *) echo "make release: name the version: make release VERSION=x.y.z" >&2; exit 2;; esac
	$(GO) run ./tools/npu-release check-version --chart charts/npu-stack --version $(VERSION)
	rm -rf $(DIST) && mkdir -p $(DIST)
	$(MAKE) --no-print-directory images VERSION=$(VERSION) REGISTRY=$(if $(REGISTRY),$(REGISTRY)/npu-stack) IMAGES_OUT=$(RELEASE_DIR)/images
	$(MAKE) --no-print-directory chart VERSION=$(VERSION) REGISTRY=$(if $(REGISTRY),$(REGISTRY)/charts) IMAGES_REPO=$(if $(REGISTRY),$(REGISTRY)/npu-stack) CHART_OUT=$(DIST)
	for p in $(HOOKS_PLATFORMS); do \
		CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(RELEASE_DIR)/bin/$${p%/*}_$${p#*/}/ ./cmd/npu-hooks || exit 1; \
	done
	$(GO) run ./tools/npu-release archives --version $(VERSION) --bin-dir $(RELEASE_DIR)/bin --out $(DIST) $(addprefix --platforms ,$(HOOKS_PLATFORMS))

# The demo checks the machine first (ci/prereqs.sh: installs the missing
# Debian packages as root, else names the command that does), in the
# first second rather than after a build of many minutes. Its real 910B
# and 310P nodes need the node binaries (make nodes); DEMO_REAL_NODES=0
# leaves them out, and their build. The demo program is built with a
# printed step, then run: `go run` compiled it for minutes in silence.
# The sub-make, not prerequisites of this target, so that under -j
# nothing builds before the check.
DEMO_BIN ?= $(CURDIR)/.cache/bin/npu-demo
demo: ## the main job: install, manual upgrade, chip self-healing and rollback on a local cluster (DEMO_NODES simulated nodes, default 6, and a real 910B and 310P node)
	@bash ci/prereqs.sh demo
	@$(MAKE) --no-print-directory controlplane $(if $(filter 0,$(DEMO_REAL_NODES)),,nodes)
	@bash ci/progress.sh 1 1 "building the demo program (tests/cmd/npu-demo) into $(DEMO_BIN): about 5 min with a cold Go cache, seconds after" $(GO) build -o $(DEMO_BIN) ./tests/cmd/npu-demo
	$(DEMO_BIN)

controlplane: ## build etcd, kube-apiserver, controller-manager, scheduler, kubectl, kwok once into .cache/
	bash ci/build-controlplane.sh

# ENGINES=helm3 builds only that one (the README tour's helm CLI): the
# six deployers take about 28 min with a cold Go cache on 2 cores, helm v3
# about 2; prometheus and alertmanager (the alert tests) are not measured
# cold yet.
ENGINES ?=
engines: ## build the deployers the tests drive (helm v3/v4, helmfile, Flux source-controller and helm-controller, Argo CD) and the alert tests' Prometheus, promtool and amtool once into .cache/engines; ENGINES=helm3 only that one
	bash ci/build-engines.sh $(ENGINES)

nodes: ## build what real test-bed nodes run (kubelet, containerd, runc, CNI plugins, crictl, pause) once into .cache/nodes
	bash ci/build-nodes.sh

# The machine is checked first (ci/prereqs.sh, as for the demo). The
# deployers and the real nodes' binaries build while the tests run: the
# tests that need them wait for that build (ci/test.sh).
test: ## run every test (unit and integration on the local control plane)
	@bash ci/prereqs.sh test
	@$(MAKE) --no-print-directory controlplane
	GO=$(GO) bash ci/test.sh .cache $(TEST_FLAGS) $(TEST_FIRST) ./...

# The fast loop: what needs no control plane (lint, the unit tests, the
# chart's render and schema tests, and the tests of ci/prereqs.sh and
# ci/progress.sh; -short skips the chart tests that need the API server,
# which make test runs).
check: lint ## lint, unit and chart tests, no control plane (a few minutes)
	$(GO) test -short -count=1 ./internal/... ./cmd/... ./tests/chart/ ./tests/ciscripts/

unit: ## run the tests that need no control plane
	$(GO) test -short ./internal/... ./cmd/...

FUZZTIME ?= 20s
fuzz: ## short fuzz run of the npu-smi parser (FUZZTIME, default 20s)
	$(GO) test -run=NONE -fuzz=FuzzParse -fuzztime=$(FUZZTIME) ./internal/npusmi/

# The scale benchmark: full = N 100 and 1,000 with the peer, 5,000 and
# 10,000 alone (hours; `npu-bench -nodes 100` runs one fleet of it);
# realistic = N 10 in real time (40 minutes); quick = N 100 in about 5
# minutes, for CI. It fails only on broken function, never on a slow figure.
BENCH ?= full
bench: controlplane ## rollouts of KWOK fleets measured against NVIDIA's upgrade library; results in .cache/bench/results.{md,json} (BENCH=quick|realistic|full)
	$(GO) run ./tests/cmd/npu-bench --mode $(BENCH) --out .cache/bench

lint: ## gofmt, go vet and golangci-lint
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags simhost ./internal/host/... ./internal/healthwatch/... ./cmd/...
	bash ci/golangci-lint.sh

cluster: controlplane build ## start the local cluster in the background and print how to use it
	bash ci/cluster.sh up

cluster-down: ## stop the local cluster started by `make cluster`
	bash ci/cluster.sh down

clean: ## remove build outputs (keeps the control-plane cache)
	rm -rf bin
