#!/usr/bin/env bash
# Builds migflex's image from the Dockerfile, as a user would with
# `docker build`, in the engine of hack/docker/up.sh, which cannot reach a
# registry or the internet:
#   - the base images are this machine's stand-ins (base-images.sh), given
#     as the Dockerfile's BUILD_IMAGE and BASE_IMAGE build arguments;
#   - `go mod download` in the build reaches the Go module proxy protocol
#     served from this machine's module cache (filled first with `go mod
#     download` here), on the engine's bridge address, inside its network
#     namespace: GOPROXY=http://<bridge>:<port>, GOSUMDB=off (go.sum still
#     verifies every module).
# Usage: hack/docker/build-image.sh [IMAGE]   (default migflex:kind)
set -euo pipefail
# shellcheck source=hack/docker/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ $EUID -eq 0 ]] || die "needs root"
IMAGE=${1:-migflex:kind}
PROXY_PORT=${PROXY_PORT:-3000}
d version >/dev/null 2>&1 || die "no engine at $DOCKER_SOCK: run hack/docker/up.sh first"

# Assigned first: a failing base-images.sh stops the build here (a failed
# command substitution in read's here-string would not).
base_flags=$("$HACK_DOCKER/base-images.sh")
read -ra base_args <<<"$base_flags"
cd "$ROOT"
go mod download
modcache=$(go env GOMODCACHE)/cache/download
proxy=${DOCKER_BIP%/*}
# nsenter itself, not the in_netns function: $! must be the server's PID
# (nsenter execs it), not that of a subshell whose death would orphan it.
bash -c "$DETACHED" _ nsenter --net="/run/netns/$DOCKER_NETNS" python3 -m http.server "$PROXY_PORT" --bind "$proxy" --directory "$modcache" \
	>"$CACHE_DIR/docker/modproxy.log" 2>&1 </dev/null &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT
for ((i = 0; i < 50; i++)); do
	in_netns curl -sf -o /dev/null "http://$proxy:$PROXY_PORT/" && break
	sleep 0.2
done
log "module proxy on $proxy:$PROXY_PORT (in $DOCKER_NETNS) from $modcache"
t=$SECONDS
if ! DOCKER_BUILDKIT=1 d build -t "$IMAGE" "${base_args[@]}" \
	--build-arg GOPROXY="http://$proxy:$PROXY_PORT" --build-arg GOSUMDB=off \
	--progress=plain "$ROOT" >"$CACHE_DIR/docker/build.log" 2>&1; then
	tail -n 30 "$CACHE_DIR/docker/build.log" >&2
	die "docker build failed (log: $CACHE_DIR/docker/build.log)"
fi
log "built $IMAGE in $((SECONDS - t))s: $(d image inspect -f '{{.Size}}' "$IMAGE") bytes"
