# migflex's image: /device-plugin (the node agent), /webhook (the
# admission webhook and its `webhook certgen` Job) and /planner, the same
# layout as the local test cluster's lc.local/migflex:e2e
# (hack/cluster/images.sh).
#
# One image holds both binaries: one tag to pin and release, and the
# chart's three workloads (agent, webhook, certgen) always run the same
# build. The agent needs glibc (go-nvml is cgo and dlopens the driver's
# libnvidia-ml, as NVIDIA's device plugin does), so the base is distroless
# base, not static; the static webhook runs there unchanged, and pays ~20 MB
# of glibc it does not use.
#
# The image's user is distroless's nonroot (65532): the webhook and certgen
# run as it; the agent's manifests ask for root, which it needs for the
# kubelet's directories.
#
#   docker build -t ghcr.io/migflex/migflex:0.1.0 .
#
# It needs BuildKit (RUN --mount; the default since Docker 23, or
# DOCKER_BUILDKIT=1 on Docker 20.10) and its built-in Dockerfile frontend:
# there is no `# syntax=` line, which would make every build pull a
# frontend image.
#
# The build is `make build`, the one CI runs and tests. One build stage, on
# the builder's own platform, makes the binaries of every target platform
# (amd64 and arm64, for Grace nodes): Go cross-compiles, and the cgo agent
# uses Debian's C cross compiler for the target, which `make build
# GOARCH=arm64` uses too (and CI checks: make test-arm64). So
#   docker buildx build --platform linux/amd64,linux/arm64 -t ... .
# runs no emulated compiler. Debian 12 in both stages, so the agent links
# the glibc it runs with.
#
# Both base images are build arguments, for builders that cannot pull them
# and build their own (hack/docker/base-images.sh, for the kind run on a
# machine with no registry): BUILD_IMAGE needs Go with cgo (gcc, libc6-dev)
# and make, GOPATH=/go as in the golang image; BASE_IMAGE needs glibc.
# GOPROXY (and GOSUMDB, GOFLAGS) reach `go mod download` when given, e.g. a
# local module proxy; unset, Go's defaults apply.
ARG GO_VERSION=1.26.8
ARG BUILD_IMAGE=golang:${GO_VERSION}-bookworm
ARG BASE_IMAGE=gcr.io/distroless/base-debian12:nonroot

FROM --platform=$BUILDPLATFORM ${BUILD_IMAGE} AS build
ARG TARGETARCH
ARG GOPROXY
ARG GOSUMDB
ARG GOFLAGS
WORKDIR /src
# The C cross compiler for a target that is not the builder's (the
# Makefile's CROSS_CC_<arch>); a native build installs nothing.
RUN set -e; native=$(go env GOARCH); \
    case "${TARGETARCH:-$native}" in \
      "$native") pkgs= ;; \
      arm64) pkgs="gcc-aarch64-linux-gnu libc6-dev-arm64-cross" ;; \
      amd64) pkgs="gcc-x86-64-linux-gnu libc6-dev-amd64-cross" ;; \
      *) echo "no C cross compiler known for $TARGETARCH" >&2; exit 1 ;; \
    esac; \
    if [ -n "$pkgs" ]; then \
      apt-get update -qq && apt-get install -y -qq --no-install-recommends $pkgs && rm -rf /var/lib/apt/lists/*; \
    fi
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY Makefile ./
COPY cmd/ cmd/
COPY internal/ internal/
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    make build GOARCH=${TARGETARCH:-$(go env GOARCH)} BIN=/src/bin

FROM ${BASE_IMAGE}
COPY --from=build /src/bin/device-plugin /src/bin/webhook /src/bin/planner /
USER 65532:65532
ENTRYPOINT ["/device-plugin"]
