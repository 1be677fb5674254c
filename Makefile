# migflex Makefile. The README's two commands are `make demo` and `make test`.
#
# Test layers:
#   make test-unit         lint + go test ./...           no root, no cluster
#   make test-integration  go test ./... against a real etcd + kube-apiserver
#                          (envtest; the same packages, whose integration
#                          tests stop skipping)           no root
#   make test-e2e          the end-to-end suite on a local three-node cluster
#                          (kubelets, containerds; NODES=1 for one) root;
#                          changes host networking while up, restored by
#                          the tear-down
#   make test-e2e-oldest   the device-plugin, webhook and planner cases of it
#                          on the oldest supported Kubernetes minor
#   make test-faults       the fault suite (test/e2e TestFault*, MIGFLEX_E2E_FAULTS=1)
#                          on a fresh local cluster: kills, restarts and
#                          reboots its processes (docs/RELIABILITY.md); root
#   make test-arm64        the arm64 build, run under qemu-user-static
#   make test              all of the above but test-faults (CI, .ci/run,
#                          runs make test and then make test-faults)
#   make test-matrix       the whole e2e suite on every supported minor, its
#                          results into docs/SUPPORT.md; not part of make test
#   make soak DURATION=30m random churn on the local cluster (annotations,
#                          pods, deletions, agent and kubelet restarts, NVML
#                          errors) with the invariant checker every second,
#                          and a report (docs/RELIABILITY.md); SEED=n repeats
#                          a run; root; not part of make test, not in CI
#
# K8S_VERSION picks the Kubernetes minor of the local cluster and envtest
# (hack/cluster/k8s/minors; unset: the default one), e.g.
#   K8S_VERSION=v1.35.4 make test-e2e
# GOARCH=arm64 cross-compiles (make build GOARCH=arm64, into bin/linux_arm64).
SHELL := /bin/bash
GO ?= go
HOST_GOARCH := $(shell $(GO) env GOHOSTARCH)
GOARCH ?= $(HOST_GOARCH)
# A cross build goes beside the native one, never over it (images.sh and
# the e2e suite take bin/).
ifeq ($(GOARCH),$(HOST_GOARCH))
BIN ?= $(CURDIR)/bin
CGO_CC ?= $(CC)
else
BIN ?= $(CURDIR)/bin/linux_$(GOARCH)
# The agent is cgo (go-nvml): Debian's cross compilers, gcc-aarch64-linux-gnu
# on amd64 and gcc-x86-64-linux-gnu on arm64.
CGO_CC ?= $(or $(CROSS_CC_$(GOARCH)),$(error no C cross compiler known for GOARCH=$(GOARCH)))
endif
CROSS_CC_arm64 := aarch64-linux-gnu-gcc
CROSS_CC_amd64 := x86_64-linux-gnu-gcc
STATICCHECK_VERSION ?= v0.7.0
CACHE_DIR ?= $(CURDIR)/.cache
ENVTEST_ASSETS := $(CACHE_DIR)/envtest
# Hang protection for whole test binaries; no test relies on it.
GO_TEST_FLAGS ?= -timeout 20m
export CACHE_DIR
# go-nvml's cgo wrappers call NVML functions its header marks deprecated,
# and gcc warns about each of them (hundreds of lines the first time the
# agent builds). Only that warning is turned off; every other C warning
# still shows (test/manifests/build_test.go).
CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
export CGO_CFLAGS

.PHONY: all build kubectl-migflex lint test test-deps test-unit test-integration test-e2e test-e2e-oldest test-faults test-arm64 test-matrix soak \
	envtest-assets helm promtool bench replay k8s-binaries images cluster-up cluster-down demo clean test-docker kind

all: build

# The node agent links go-nvml (cgo); the webhook and the planner are static.
# Their recipe is what the image copies (test/manifests); the kubectl plugin,
# which runs on an operator's machine, is a target of its own.
build: kubectl-migflex
	GOOS=linux GOARCH=$(GOARCH) CC=$(CGO_CC) CGO_ENABLED=1 $(GO) build -trimpath -o $(BIN)/device-plugin ./cmd/device-plugin
	GOOS=linux GOARCH=$(GOARCH) CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/webhook ./cmd/webhook
	GOOS=linux GOARCH=$(GOARCH) CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/planner ./cmd/planner

# `kubectl migflex` (README): static, for any GOARCH.
kubectl-migflex:
	GOOS=linux GOARCH=$(GOARCH) CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/kubectl-migflex ./cmd/kubectl-migflex

# The e2e and Docker tests (build tags e2e, docker) are linted too.
lint:
	$(GO) vet ./...
	$(GO) vet -tags e2e,docker ./test/...
	@out=$$(gofmt -l $$(git ls-files '*.go' ; git ls-files -o --exclude-standard '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@PATH=$$PATH:$$($(GO) env GOPATH)/bin; command -v staticcheck >/dev/null || \
	  $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	PATH=$$PATH:$$($(GO) env GOPATH)/bin staticcheck ./...
	PATH=$$PATH:$$($(GO) env GOPATH)/bin staticcheck -tags e2e,docker ./test/...
	@if command -v shellcheck >/dev/null; then echo "shellcheck every *.sh and .ci/run"; \
	  shellcheck -x $$(git ls-files '*.sh') .ci/run; \
	else echo "shellcheck not installed: shell scripts not linted (make test-deps installs it)"; fi

# Debian packages the tests need besides what the cluster needs (up.sh
# installs those): shellcheck, which the manifest tests require, and for
# test-arm64 the C cross compiler and qemu-user-static. Installed with
# apt-get when missing, as root, as `make demo` installs the cluster's.
test-deps:
	hack/install-debs.sh shellcheck:shellcheck gcc-aarch64-linux-gnu:aarch64-linux-gnu-gcc \
	  libc6-dev-arm64-cross:/usr/aarch64-linux-gnu/include/stdio.h qemu-user-static:qemu-aarch64-static

# Unit tests: no root, no cluster. Integration tests (internal/testsupport/testenv) skip
# here unless envtest assets happen to be built.
test-unit: lint
	$(GO) test $(GO_TEST_FLAGS) ./...

# Pinned kube-apiserver, kubelet, controller-manager, scheduler, kubectl,
# etcd and containerd, built once per version into $(CACHE_DIR) (cold: minutes
# on 2 cores; then instant).
k8s-binaries:
	hack/cluster/build.sh

# etcd, kube-apiserver and kubectl for envtest (KUBEBUILDER_ASSETS), of the
# minor K8S_VERSION picks (the default one when unset).
envtest-assets:
	hack/cluster/build.sh etcd kube-apiserver kubectl

# The pinned Helm the manifest tests render the chart with (test/manifests).
helm:
	deployments/hack/install-helm.sh >/dev/null

# The pinned promtool the manifest tests check the alert rules with.
promtool:
	deployments/hack/install-promtool.sh >/dev/null

# MIGFLEX_REQUIRE_ENVTEST=1 turns testenv's skip into a failure, so this target
# can never pass by skipping.
test-integration: envtest-assets helm promtool test-deps
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) MIGFLEX_REQUIRE_ENVTEST=1 $(GO) test $(GO_TEST_FLAGS) ./...

# Builds bin/, the cluster binaries and images, brings the cluster up, runs
# test/e2e, and always tears down (hack/cluster/e2e.sh). Needs root.
test-e2e:
	hack/cluster/e2e.sh

# The fault suite (docs/RELIABILITY.md): the e2e tests that break the
# cluster's own processes at a chosen moment and check the invariants after;
# the rest of the suite skips them (they need MIGFLEX_E2E_FAULTS=1). Their
# outages and quiet periods add up past e2e.sh's 30m go test timeout, hence
# a longer one (hang protection, not a budget).
FAULTS_RUN ?= ^TestFault
FAULTS_TIMEOUT ?= 60m
test-faults:
	MIGFLEX_E2E_FAULTS=1 hack/cluster/e2e.sh -timeout $(FAULTS_TIMEOUT) -run '$(FAULTS_RUN)'

# The soak (docs/RELIABILITY.md, "Soak"): TestSoak, which skips unless
# MIGFLEX_SOAK_DURATION is set, for DURATION (Go's units: 30m, 1h30m) on a
# fresh local cluster; SEED repeats a run's choices (the report prints it).
# The report goes to stdout and _output/soak/. go test's hang protection is
# the duration and 30 minutes more (the last operation's wait, the
# tear-down of its pods).
soak:
	@[[ -n "$(DURATION)" ]] || { echo "usage: make soak DURATION=30m [SEED=n]" >&2; exit 2; }
	@secs=$$(sed -E 's/h/*3600+/g; s/m/*60+/g; s/s/+/g; s/\+$$//' <<<"$(DURATION)"); \
	[[ $$secs =~ ^[0-9*+]+$$ ]] || { echo "DURATION=$(DURATION): whole hours, minutes, seconds (30m, 1h30m)" >&2; exit 2; }; \
	MIGFLEX_SOAK_DURATION=$(DURATION) MIGFLEX_SOAK_SEED=$(SEED) \
		hack/cluster/e2e.sh -run '^TestSoak$$' -timeout $$(( secs + 1800 ))s

# The oldest supported minor (hack/cluster/k8s/minors) and the e2e cases
# `make test` runs on it besides the whole suite on the default minor: the
# ones that prove the kubelet's, the scheduler's and the API's side of
# migflex there (annotate -> success -> allocatable and removed profiles at
# 0, a pod's MIG device, the webhook's fallback rewrite, a busy GPU
# protected, a kubelet restart, the agent's write of the allocatable the
# kubelet holds, the planner's reshape, metrics only to tokens the API
# server authorizes, the DRA node beside the device-plugin ones and the
# planner reshaping it, the webhook's fallback over every node and the
# planner's choice between nodes) with the harness and deprecation checks.
# `make test-matrix` runs everything on every minor.
K8S_OLDEST = $(shell awk '!/^\#/ && NF { print $$1; exit }' hack/cluster/k8s/minors)
E2E_OLDEST_RUN ?= ^(TestHarnessNetworkSafety|TestDeprecationWarningsAreCaught|TestMigflexInstalled|TestLayoutAnnotation|TestSuccessMeansAllocatable|TestPodGetsMigDevice|TestWebhookFallback|TestBusyGPU|TestKubeletRestart|TestPublishedAllocatableIsHeld|TestPlannerReshapesForAPendingPod|TestMetricsNeedAnAuthorizedToken|TestDRA|TestWebhookFallbackSeesEveryNode|TestPlannerChoosesBetweenNodes|TestDRADynamic|TestDRASharedClaim|TestPlannerReservesForMultiGPUPod|TestDRAReservationKeepsGPU)$$
test-e2e-oldest:
	K8S_VERSION=$(K8S_OLDEST) hack/cluster/e2e.sh -run '$(E2E_OLDEST_RUN)'

# arm64 (Grace nodes): the cross build, and the agent's offline commands
# run under qemu-user-static.
test-arm64:
	hack/check-arm64.sh

# Every supported minor's whole e2e suite, one after the other, and the
# results table in docs/SUPPORT.md. Root; not part of `make test`.
test-matrix:
	hack/cluster/matrix.sh

# test-deps first, so that lint checks the scripts too; test-arm64 last:
# CI's prebuild (hack/cluster/prebuild.sh) cross-builds for it while the
# e2e suites leave the cores idle.
test: test-deps lint test-unit test-integration test-e2e test-e2e-oldest test-arm64

# Image tarballs the local cluster imports (testbox, pause, migflex from bin/).
images: build
	hack/cluster/images.sh

# A local cluster to explore by hand (root); prints the KUBECONFIG to export.
cluster-up: images k8s-binaries
	hack/cluster/up.sh

cluster-down:
	hack/cluster/down.sh

# migflex's main job on simulated GPUs, narrated with kubectl (root): builds,
# brings the local cluster up, installs migflex from its manifests,
# partitions the node and shows a pod's fallback. The cluster stays up.
demo:
	hack/demo.sh

# migflex's image from the Dockerfile with `docker build`, and the network
# safety of the Docker engine it runs in: the project's own dockerd, in a
# network namespace with no way off the machine (hack/docker/README.md),
# always stopped afterwards. Root. Not part of `make test`.
test-docker:
	hack/docker/run.sh hack/docker/test.sh

# hack/kind-up.sh end to end in the project's own Docker engine, with a
# kind node image and migflex's image built here, and kind's network safety
# checked with the cluster up (hack/kind/README.md); the cluster is deleted
# and the engine stopped afterwards. Root. Not part of `make test`: its
# first run builds base images, the image and a node image from scratch.
kind:
	hack/docker/run.sh hack/kind/run.sh

# Benchmarks (docs/BENCHMARKS.md): never part of `make test`; results in
# _output/bench/<UTC time>/.
bench: envtest-assets
	test/bench/run.sh

# The planner's trace replay (docs/PLANNER.md); never part of `make test`.
# The openb trace is not in the repository: TRACE_DIR holds its CSV files
# (github.com/alibaba/clusterdata, cluster-trace-gpu-v2023/csv), TRACE picks
# the pod list. Results in _output/replay/<pod list>/replay.{json,md}.
TRACE_DIR ?= ../shared/traces/alibaba-openb
TRACE ?= openb_pod_list_default.csv
REPLAY_FLAGS ?=
replay:
	$(GO) run ./test/bench/cmd/replay -pods $(TRACE_DIR)/$(TRACE) -nodes $(TRACE_DIR)/openb_node_list_gpu_node.csv \
	  -out _output/replay/$(basename $(TRACE)) $(REPLAY_FLAGS)

clean:
	rm -rf $(BIN)
