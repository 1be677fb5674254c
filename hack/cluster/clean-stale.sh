#!/usr/bin/env bash
# Removes what a local cluster left on the host when it died with its
# machine: a run killed mid-way, or a machine image taken while a cluster
# was up, whose record ($CLUSTER_DIR/host) down.sh needs is gone or belongs
# to another checkout. up.sh refuses to start over such leftovers, rightly
# on a machine someone uses, so this is for machines nobody else uses: .ci/run
# calls it on CI's fresh machine. Run hack/cluster/down.sh first, which
# undoes what a record names.
#
# It refuses (exit 3, nothing changed) while any kubelet, containerd, etcd,
# kube-apiserver, apiproxy or dockerd process runs on the host (in any
# namespace), whoever started it: then the paths may be live.
set -uo pipefail
# shellcheck source=hack/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $EUID -eq 0 ]] || die "needs root"
for p in kubelet containerd etcd kube-apiserver apiproxy dockerd; do
	if pid=$(pgrep -x "$p" | head -1) && [[ -n $pid ]]; then
		echo "$(basename "$0"): $p is running (PID $pid): nothing is stale; use hack/cluster/down.sh" >&2
		exit 3
	fi
done

# Deepest mounts first, under the host paths the kubelet and containerd use
# and where the nodes' namespaces are kept.
stale_mounts() {
	awk '{print $2}' /proc/mounts | sed 's/\\040/ /g' | while IFS= read -r m; do
		for p in "${HOST_PATHS[@]}" "$NS_DIR"; do
			[[ $m == "$p" || $m == "$p"/* ]] && echo "$m"
		done
	done | sort -r
}
for m in $(stale_mounts); do
	umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
	log "unmounted $m"
done
for p in "${HOST_PATHS[@]}"; do
	[[ -e $p ]] || continue
	rm -rf "$p" && log "removed $p"
done
for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods.slice /sys/fs/cgroup/*/mfnode[0-9]*; do
	[[ -d $d ]] || continue
	find "$d" -depth -type d -exec rmdir {} + 2>/dev/null && log "removed cgroup $d"
done
# A node's veth outlives its namespace files while something holds the
# namespace; deleting the host's end takes the node's end too.
for l in $(node_veths); do ip link del "$l" 2>/dev/null && log "removed link $l"; done
for b in "$BRIDGE" "$NODES_BRIDGE"; do
	ip link del "$b" 2>/dev/null && log "removed bridge $b"
done
ip route del blackhole "$SERVICE_CIDR" 2>/dev/null && log "removed blackhole route $SERVICE_CIDR"
for c in "$ISOLATION_CHAIN" "$INPUT_CHAIN"; do
	iptables -S "$c" >/dev/null 2>&1 || continue
	while iptables -D FORWARD -j "$c" 2>/dev/null; do :; done
	while iptables -D INPUT -j "$c" 2>/dev/null; do :; done
	iptables -F "$c" 2>/dev/null && iptables -X "$c" 2>/dev/null && log "removed iptables chain $c"
done

left=0
for p in "${HOST_PATHS[@]}"; do
	[[ ! -e $p ]] || { echo "$(basename "$0"): $p remains" >&2; left=1; }
done
if [[ -n $(stale_mounts) ]]; then echo "$(basename "$0"): mounts remain: $(stale_mounts | tr '\n' ' ')" >&2; left=1; fi
for l in $(node_veths) "$BRIDGE" "$NODES_BRIDGE"; do
	if ip link show "$l" >/dev/null 2>&1; then echo "$(basename "$0"): link $l remains" >&2; left=1; fi
done
exit $left
