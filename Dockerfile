# syntax=docker/dockerfile:1
#
# migflex's image: /device-plugin (the node agent) and /webhook (the
# admission webhook and its `webhook certgen` Job), the same layout as the
# local test cluster's lc.local/migflex:e2e (hack/cluster/images.sh).
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
# The build is `make build`, the one CI runs and tests. Build per platform
# natively (the cgo agent does not cross-compile without a C cross
# toolchain). Debian 12 in both stages, so the agent links the glibc it
# runs with.
ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
COPY Makefile ./
COPY cmd/ cmd/
COPY internal/ internal/
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    make build

FROM gcr.io/distroless/base-debian12:nonroot
COPY --from=build /src/bin/device-plugin /src/bin/webhook /
USER 65532:65532
ENTRYPOINT ["/device-plugin"]
