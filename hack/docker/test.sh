#!/usr/bin/env bash
# The project's Docker checks, with the engine of hack/docker/up.sh running
# (hack/docker/run.sh hack/docker/test.sh, or `make test-docker`):
# builds the base-image stand-ins and migflex's image from the Dockerfile
# (build-image.sh), then runs test/docker: the engine's network safety and
# the image the Dockerfile made.
set -euo pipefail
# shellcheck source=hack/docker/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
IMAGE=${IMAGE:-migflex:docker-test}
"$HACK_DOCKER/build-image.sh" "$IMAGE"
GO_VERSION=$(sed -n 's/^ARG GO_VERSION=//p' "$ROOT/Dockerfile")
cd "$ROOT"
DOCKER_TEST_IMAGE=migflex.local/golang:$GO_VERSION-bookworm DOCKER_TEST_MIGFLEX_IMAGE=$IMAGE \
	go test -tags docker -count=1 -v ./test/docker/...
