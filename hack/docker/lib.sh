# shellcheck shell=bash disable=SC2034 # the scripts sourcing this use its variables
# Settings of the project's own Docker engine (hack/docker/up.sh): dockerd
# in a network namespace of its own with no way off the machine, for the
# kind run and for `docker build` of the Dockerfile. Sourced, not run.

HACK_DOCKER=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HACK_DOCKER/../.." && pwd)
CACHE_DIR=${CACHE_DIR:-$ROOT/.cache}
# The network namespace dockerd, its containerd and every container live in.
# It has loopback and Docker's bridges and nothing else: no interface to
# the host, no default route.
DOCKER_NETNS=${DOCKER_NETNS:-migflex-docker}
# Docker's networks, in documentation ranges (RFC 5737) that no real host
# has: the default bridge, and the pool user networks (kind's) come from.
DOCKER_BIP=${DOCKER_BIP:-192.0.2.1/24}
DOCKER_POOL=${DOCKER_POOL:-198.51.100.0/24}
DOCKER_POOL_SIZE=${DOCKER_POOL_SIZE:-25}
# The containers' nameserver: the bridge's own address in the namespace,
# where up.sh runs hack/refusedns, which refuses every query (Docker would
# otherwise hand out the host's nameservers, or Google's when the host's
# are on loopback).
DOCKER_DNS=${DOCKER_DNS:-${DOCKER_BIP%/*}}
# Images and build cache persist here between runs; run state under RUN.
DOCKER_DATA=${DOCKER_DATA:-$CACHE_DIR/docker/data}
DOCKER_RUN=${DOCKER_RUN:-/run/migflex-docker}
DOCKER_SOCK=$DOCKER_RUN/docker.sock
DOCKER_LOG=${DOCKER_LOG:-$CACHE_DIR/docker/dockerd.log}
# Host paths the engine creates whatever it is told: containerd's shims put
# their sockets in /run/containerd/s, dockerd its plugin sockets in
# /run/docker/plugins, BuildKit's runc its state in /run/runc. The local
# cluster (hack/cluster/up.sh) refuses to start while /run/containerd
# exists, so up.sh records which of these were absent and down.sh removes
# those, after the namespace. /run/netns (ip netns add) goes too when it is
# empty.
HOST_RUN_PATHS=(/run/containerd /run/docker /run/runc /run/netns)
# Debian's docker.io CLI (20.10), which builds with BuildKit without the
# buildx plugin; a newer docker on PATH would need buildx for that.
DOCKER_CLI=${DOCKER_CLI:-/usr/bin/docker}

T0=${T0:-$SECONDS}
log() { echo "[$(basename "$0") $((SECONDS - T0))s] $*"; }
die() { echo "$(basename "$0"): $*" >&2; exit 1; }
d() { DOCKER_HOST=unix://$DOCKER_SOCK "$DOCKER_CLI" "$@"; }
# in_netns <command...>: runs a command in the engine's network namespace
# only; the mount namespace stays the host's (ip netns exec would remount
# /sys and hide the cgroup hierarchies dockerd needs).
in_netns() { nsenter --net="/run/netns/$DOCKER_NETNS" "$@"; }
# bash -c "$DETACHED" _ <command...> runs a command with no file
# descriptor beyond 0-2 inherited, so a long-lived process never keeps a
# lock its caller holds (flock(1) passes its descriptor to every
# descendant). The command replaces that bash: started with &, $! is its PID.
# shellcheck disable=SC2016 # expanded by that bash
DETACHED='for f in /proc/$$/fd/*; do n=${f##*/}; if ((n > 2)); then eval "exec $n>&-"; fi; done; exec "$@"'
dockerd_pid() {
	local pid
	[[ -s $DOCKER_RUN/docker.pid ]] || return 0
	pid=$(<"$DOCKER_RUN/docker.pid")
	[[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] || return 0
	[[ $(tr '\0' '\n' <"/proc/$pid/cmdline" | head -n1) == *dockerd ]] && echo "$pid"
	return 0
}
