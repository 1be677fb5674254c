#!/usr/bin/env bash
# Reboots a node of the cluster hack/cluster/up.sh brought up, as root, as
# far as its processes go: stops its kubelet, kills every container of the
# node (the agent's included) as a power cut would, stops its containerd and
# any shim left serving its socket, runs COMMAND while the node is down (say
# the simulator's `sim reboot`, which drops the simulated GPUs' instances as
# a real reboot does), then starts containerd and the kubelet again with
# their own command lines (restart.sh --stop/--start) and returns once both
# answer. The kubelet then starts the node's pods again, in new sandboxes.
#
#   hack/cluster/reboot.sh NODE [COMMAND...]
#   hack/cluster/reboot.sh mf-b200 bin/device-plugin sim reboot --sim-config F --node-name mf-b200
#
# Not node 1: its containerd and kubelet are this host's, and so is the
# control plane, which a reboot of node 1 would take down too. The node's
# network and mount namespaces stay (a real reboot would make them again,
# with the same addresses and directories).
set -euo pipefail
# shellcheck source=hack/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $EUID -eq 0 ]] || die "needs root"
check_cluster_dir
(($# >= 1)) || die "usage: $(basename "$0") NODE [COMMAND...] (nodes after the first: $(node_names | tail -n +2 | tr '\n' ' '))"
node=$1
shift
n=$(node_number "$node")
[[ -n $n ]] || die "no node $node in this cluster (nodes: $(node_names | tr '\n' ' '))"
((n > 1)) || die "node $node is this host, which runs the control plane: reboot a node after the first"
[[ -n $(pid_of "$(node_component kubelet "$node")") && -n $(pid_of "$(node_component containerd "$node")") ]] ||
	die "node $node's kubelet or containerd is not running"

"$HACK_CLUSTER/restart.sh" --stop kubelet "$node"
# Every container, SIGKILL: nothing in the node gets to shut down cleanly.
for id in $(node_ctr "$node" tasks ls -q 2>/dev/null); do
	node_ctr "$node" tasks kill -a -s SIGKILL "$id" >/dev/null 2>&1 || true
done
killed=0
for ((i = 0; i < 100; i++)); do
	[[ -z $(node_ctr "$node" tasks ls 2>/dev/null | awk 'NR > 1 && $3 != "STOPPED"') ]] && { killed=1; break; }
	sleep 0.1
done
((killed)) || log "some tasks of $node did not stop after SIGKILL: $(node_ctr "$node" tasks ls 2>/dev/null | tr '\n' ' ')"
"$HACK_CLUSTER/restart.sh" --stop containerd "$node"
sock=$(node_dir "$node")/containerd/containerd.sock
for p in /proc/[0-9]*; do
	args=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
	[[ $args == *"-address $sock "* ]] || continue
	kill -KILL "${p#/proc/}" 2>/dev/null && log "killed shim ${p#/proc/}"
done
log "node $node is down"

rc=0
if (($# > 0)); then
	log "running while $node is down: $*"
	"$@" || rc=$?
	((rc == 0)) || log "the command failed (exit $rc); starting $node again anyway"
fi
"$HACK_CLUSTER/restart.sh" --start containerd "$node"
"$HACK_CLUSTER/restart.sh" --start kubelet "$node"
log "node $node is up again"
exit "$rc"
