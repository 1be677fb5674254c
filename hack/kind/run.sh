#!/usr/bin/env bash
# hack/kind-up.sh end to end on this machine, in the project's own Docker
# engine (run it through hack/docker/run.sh, as `make kind` does), and the
# cluster deleted afterwards:
#   1. migflex's image from the Dockerfile (hack/docker/build-image.sh),
#   2. the kind node image (node-image.sh),
#   3. hack/kind-up.sh with them (KIND_NODE_IMAGE, SKIP_BUILD=1: step 1 is
#      the Dockerfile build kind-up.sh would do, with this machine's base
#      images and module proxy),
#   4. test/docker's network checks, kind's included, with the cluster up,
#   5. kind delete cluster.
# Needs root, and the host's cluster lock: kind's nodes run kubelets.
set -euo pipefail
HACK_KIND=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=hack/docker/lib.sh
source "$HACK_KIND/../docker/lib.sh"
[[ $EUID -eq 0 ]] || die "needs root"
d version >/dev/null 2>&1 || die "no engine at $DOCKER_SOCK: run this through hack/docker/run.sh"
export DOCKER_HOST=unix://$DOCKER_SOCK
CLUSTER_NAME=${CLUSTER_NAME:-migflex}
IMAGE=${IMAGE:-migflex:kind}
KIND_VERSION=${KIND_VERSION:-v0.32.0}
tools=$CACHE_DIR/tools
PATH=$tools:$PATH

if ! kind version 2>/dev/null | grep -q "kind $KIND_VERSION "; then
	log "installing kind $KIND_VERSION into $tools"
	GOBIN=$tools CGO_ENABLED=0 go install "sigs.k8s.io/kind@$KIND_VERSION"
fi
# kind-up.sh wants helm (the pinned one) and kubectl (the pinned one).
"$ROOT/deployments/hack/install-helm.sh" >/dev/null
# shellcheck source=hack/cluster/lib.sh
source "$HACK_KIND/../cluster/lib.sh"
"$HACK_CLUSTER/build.sh" kubectl >/dev/null
PATH=$K8S_BIN:$PATH

# kind's nodes bind-mount /lib/modules from the host, which Docker creates
# when it is missing: remove it again if so.
[[ -e /lib/modules ]] || made_modules=1
cleanup() {
	in_netns kind delete cluster --name "$CLUSTER_NAME" || true
	if [[ ${made_modules:-0} == 1 ]]; then rmdir /lib/modules 2>/dev/null || true; fi
}
trap cleanup EXIT

# kind's network, made before kind would: IPv4 only, from the engine's pool
# (a documentation range). kind uses a network named kind that exists; it
# would otherwise add an IPv6 unique-local subnet.
if ! d network inspect kind >/dev/null 2>&1; then
	d network create -d bridge -o com.docker.network.bridge.enable_ip_masquerade=true kind >/dev/null
fi
log "kind network: $(d network inspect -f '{{range .IPAM.Config}}{{.Subnet}} {{end}}' kind)"

t=$SECONDS
"$HACK_DOCKER/build-image.sh" "$IMAGE"
t_image=$((SECONDS - t))
t=$SECONDS
NODE_IMAGE=migflex.local/kind-node:$K8S_VERSION
"$HACK_KIND/node-image.sh"
t_node=$((SECONDS - t))
t=$SECONDS
# In the engine's network namespace: kind publishes the API server on
# 127.0.0.1 there (dockerd's port forwarding runs in it), not on the host.
KIND_NODE_IMAGE=$NODE_IMAGE SKIP_BUILD=1 IMAGE=$IMAGE CLUSTER_NAME=$CLUSTER_NAME \
	in_netns "$ROOT/hack/kind-up.sh"
t_up=$((SECONDS - t))
# With the cluster up: the engine's and kind's network safety (test/docker,
# its kind tests included: kind's network, a node and a pod refused an
# address off the machine).
t=$SECONDS
log "network safety with the cluster up"
GO_VERSION=$(sed -n 's/^ARG GO_VERSION=//p' "$ROOT/Dockerfile")
(cd "$ROOT" && KIND_CLUSTER=$CLUSTER_NAME DOCKER_TEST_IMAGE=migflex.local/golang:$GO_VERSION-bookworm \
	go test -tags docker -count=1 -v -run 'TestEngine|TestHost|TestKind' ./test/docker/...)
t_net=$((SECONDS - t))
log "timings: image ${t_image}s, node image ${t_node}s, kind-up.sh ${t_up}s, network checks ${t_net}s"
