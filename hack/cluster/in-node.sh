#!/usr/bin/env bash
# Runs a command in a node of the cluster hack/cluster/up.sh brought up,
# as root: in its network and mount namespaces (its loopback, its pods'
# bridge, its /var/lib/kubelet and /run), as its kubelet and containerd
# see the machine. Node 1 is this host itself.
#
#   hack/cluster/in-node.sh NODE [COMMAND...]   a shell when no command
#   hack/cluster/in-node.sh mf-dra ip route
#   hack/cluster/in-node.sh mf-dra curl -s http://127.0.0.1:10248/healthz
set -euo pipefail
# shellcheck source=hack/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $EUID -eq 0 ]] || die "needs root"
(($# > 0)) || die "usage: $(basename "$0") NODE [COMMAND...] (nodes: $(node_names | tr '\n' ' '))"
node=$1
shift
[[ -n $(node_number "$node") ]] || die "no node $node in this cluster (nodes: $(node_names | tr '\n' ' '))"
read -ra wrap <<<"$(node_enter "$node")"
(($# > 0)) || set -- "${SHELL:-/bin/sh}"
exec "${wrap[@]}" "$@"
