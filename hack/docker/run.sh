#!/usr/bin/env bash
# Runs a command with the project's own Docker engine up (hack/docker/up.sh),
# DOCKER_HOST pointing at it, and always stops the engine afterwards
# (hack/docker/down.sh), so no dockerd is left running.
#   hack/docker/run.sh hack/docker/build-image.sh
set -euo pipefail
# shellcheck source=hack/docker/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ $EUID -eq 0 ]] || die "needs root"
(($#)) || die "usage: $0 COMMAND [ARG...]"
"$HACK_DOCKER/up.sh" >/dev/null
trap '"$HACK_DOCKER/down.sh"' EXIT
export DOCKER_HOST=unix://$DOCKER_SOCK
"$@"
