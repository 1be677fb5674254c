#!/usr/bin/env bash
# Starts the project's own Docker engine, as root: dockerd (Debian's
# docker.io) in the network namespace $DOCKER_NETNS, which has no
# interface to the host and no route off this machine, with its networks
# in documentation ranges. Prints the DOCKER_HOST to export.
# hack/docker/down.sh stops it and removes the namespace.
#
# Nothing here touches the host's network namespace: Docker's bridges,
# iptables chains and FORWARD policy, and its containers' traffic, all stay
# in $DOCKER_NETNS, so the local cluster (hack/cluster) and anything else
# on the host are unaffected while it runs.
#
# --privileged containers (kind's nodes) get the capabilities of this
# machine's bounding set (runc-bounded.sh), not every one the kernel knows.
set -euo pipefail
# shellcheck source=hack/docker/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ $EUID -eq 0 ]] || die "needs root"

need=()
for p in docker.io:/usr/sbin/dockerd jq:jq libcap2-bin:capsh iproute2:ip util-linux:nsenter iptables:iptables; do
	pkg=${p%%:*} probe=${p#*:}
	if [[ $probe == /* ]]; then [[ -x $probe ]] || need+=("$pkg"); else command -v "$probe" >/dev/null || need+=("$pkg"); fi
done
if ((${#need[@]})); then
	log "installing ${need[*]} with apt-get"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

[[ -z $(dockerd_pid) ]] || die "dockerd is already running (PID $(dockerd_pid)); hack/docker/down.sh stops it"
[[ ! -e /run/netns/$DOCKER_NETNS ]] || die "network namespace $DOCKER_NETNS exists; hack/docker/down.sh removes it"
# containerd's shims keep their sockets in /run/containerd/s whatever the
# state directory: this engine and the local cluster (hack/cluster), which
# refuses to start while /run/containerd exists, cannot run together.
[[ ! -e /run/containerd ]] || die "/run/containerd exists: the local cluster (hack/cluster/down.sh stops it) or another containerd is running"

failed() {
	local rc=$?
	echo "up.sh failed (exit $rc); dockerd log tail:" >&2
	tail -n 20 "$DOCKER_LOG" >&2 || true
	"$HACK_DOCKER/down.sh" >&2 || true
	exit "$rc"
}
trap failed EXIT

mkdir -p "$DOCKER_RUN"
for p in "${HOST_RUN_PATHS[@]}"; do [[ -e $p ]] || echo "$p"; done >"$DOCKER_RUN/created-paths"
ip netns add "$DOCKER_NETNS"
ip -n "$DOCKER_NETNS" link set lo up
mkdir -p "$DOCKER_RUN" "$DOCKER_DATA" "$(dirname "$DOCKER_LOG")"
cat >"$DOCKER_RUN/daemon.json" <<JSON
{
  "hosts": ["unix://$DOCKER_SOCK"],
  "data-root": "$DOCKER_DATA",
  "exec-root": "$DOCKER_RUN/exec",
  "pidfile": "$DOCKER_RUN/docker.pid",
  "bip": "$DOCKER_BIP",
  "default-address-pools": [{"base": "$DOCKER_POOL", "size": $DOCKER_POOL_SIZE}],
  "dns": ["$DOCKER_DNS"],
  "ipv6": false,
  "ip6tables": false,
  "storage-driver": "overlay2",
  "runtimes": {"runc-bounded": {"path": "$HACK_DOCKER/runc-bounded.sh"}},
  "default-runtime": "runc-bounded",
  "features": {"buildkit": true}
}
JSON
# No proxy setting reaches dockerd: a pull or a build step must fail here,
# not go around the namespace through a proxy.
setsid bash -c "$DETACHED" _ env -u http_proxy -u https_proxy -u no_proxy -u all_proxy \
	-u HTTP_PROXY -u HTTPS_PROXY -u NO_PROXY -u ALL_PROXY \
	nsenter --net="/run/netns/$DOCKER_NETNS" dockerd --config-file "$DOCKER_RUN/daemon.json" \
	</dev/null >"$DOCKER_LOG" 2>&1 &
for ((i = 0; i < 120; i++)); do
	d version >/dev/null 2>&1 && break
	sleep 0.5
done
d version >/dev/null || die "dockerd did not answer on $DOCKER_SOCK"
# The containers' nameserver, on the default bridge's address (dockerd made
# it): it refuses every query at once (hack/refusedns says why).
CGO_ENABLED=0 go build -o "$DOCKER_RUN/refusedns" "$ROOT/hack/refusedns"
setsid bash -c "$DETACHED" _ nsenter --net="/run/netns/$DOCKER_NETNS" "$DOCKER_RUN/refusedns" "$DOCKER_DNS" \
	</dev/null >"$DOCKER_RUN/refusedns.log" 2>&1 &
echo $! >"$DOCKER_RUN/refusedns.pid"
for ((i = 0; i < 50; i++)); do
	[[ -n $(in_netns ss -Hlun "src $DOCKER_DNS:53") ]] && break
	sleep 0.1
done
[[ -n $(in_netns ss -Hlun "src $DOCKER_DNS:53") ]] || die "the nameserver did not start on $DOCKER_DNS:53: $(cat "$DOCKER_RUN/refusedns.log")"
# Belt and braces beyond the missing route: nothing from Docker's bridges
# may be routed anywhere but to another of its documentation ranges.
# Frames bridged from one port of a bridge to another (physdev-is-bridged:
# Docker turns on bridge-nf-call-iptables, so they pass FORWARD too) stay
# among the containers of this namespace, whatever their addresses: kind's
# nodes exchange their pods' traffic (a Service's replies to a pod on
# another node) that way.
in_netns iptables -I DOCKER-USER 1 -m physdev --physdev-is-bridged -j RETURN
in_netns iptables -I DOCKER-USER 2 -d 192.0.2.0/24 -j RETURN
in_netns iptables -I DOCKER-USER 3 -d 198.51.100.0/24 -j RETURN
in_netns iptables -I DOCKER-USER 4 -d 203.0.113.0/24 -j RETURN
in_netns iptables -I DOCKER-USER 5 -j DROP
# The namespace answers every packet it cannot route with an ICMP error at
# once: the kernel's per-host rate limit (one a second) would otherwise be
# spent on the DNS queries the containers' nameserver never answers, and a
# container's connection off the machine would wait for its SYN retries
# instead of failing. The errors only ever go to the namespace's own
# containers.
in_netns sysctl -qw net.ipv4.icmp_ratelimit=0
trap - EXIT
log "dockerd $(d version -f '{{.Server.Version}}') in network namespace $DOCKER_NETNS; data in $DOCKER_DATA"
echo "export DOCKER_HOST=unix://$DOCKER_SOCK"
