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
# Belt and braces beyond the missing route: nothing from Docker's bridges
# may be forwarded anywhere but to another of its documentation ranges.
in_netns iptables -I DOCKER-USER 1 -d 192.0.2.0/24 -j RETURN
in_netns iptables -I DOCKER-USER 2 -d 198.51.100.0/24 -j RETURN
in_netns iptables -I DOCKER-USER 3 -d 203.0.113.0/24 -j RETURN
in_netns iptables -I DOCKER-USER 4 -j DROP
trap - EXIT
log "dockerd $(d version -f '{{.Server.Version}}') in network namespace $DOCKER_NETNS; data in $DOCKER_DATA"
echo "export DOCKER_HOST=unix://$DOCKER_SOCK"
