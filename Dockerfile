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
# The build is `make build`, the one CI runs and tests. Build per platform
# natively (the cgo agent does not cross-compile without a C cross
# toolchain). Debian 12 in both stages, so the agent links the glibc it
# runs with.
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

FROM ${BUILD_IMAGE} AS build
ARG GOPROXY
ARG GOSUMDB
ARG GOFLAGS
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY Makefile ./
COPY cmd/ cmd/
COPY internal/ internal/
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    make build

FROM ${BASE_IMAGE}
COPY --from=build /src/bin/device-plugin /src/bin/webhook /src/bin/planner /
USER 65532:65532
ENTRYPOINT ["/device-plugin"]
