#!/usr/bin/env bash
# Tears down what hack/cluster/up.sh started and undoes its host changes.
# Idempotent, and safe when nothing is up. It stops only processes up.sh
# recorded (by PID, checked against the binary it started) and whatever
# runs in the namespaces of the nodes it made, and removes only what up.sh
# recorded creating. Logs stay in $CLUSTER_DIR/logs.
#
# What it cannot undo: see "Host changes" in hack/cluster/README.md.
# No -e or -u: a tear-down does every step it can, whatever failed before.
set -o pipefail
# shellcheck source=hack/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $EUID -eq 0 ]] || die "needs root"
check_cluster_dir
if [[ -z ${MIGFLEX_CLUSTER_LOCK_HELD:-} ]]; then
	mkdir -p "$CACHE_DIR"
	exec 8>"$CACHE_DIR/cluster.lock"
	flock -w 600 8 || die "another hack/cluster/up.sh or down.sh has held $CACHE_DIR/cluster.lock for 10 minutes"
fi
if [[ ! -d $CLUSTER_DIR ]]; then
	log "nothing to tear down ($CLUSTER_DIR does not exist)"
	exit 0
fi

# The cni-* network namespaces that existed when up.sh ran are someone
# else's. Without up.sh's record of them (it is gone once a tear-down has
# finished) none is ours.
netns_before=() netns_recorded=0
if [[ -f $HOST_DIR/netns.before ]]; then
	mapfile -t netns_before <"$HOST_DIR/netns.before"
	netns_recorded=1
fi
# our_netns: the network namespaces this cluster's runtime created.
our_netns() {
	((netns_recorded)) || return 0
	local f old
	for f in /run/netns/cni-*; do
		[[ -e $f ]] || continue
		for old in "${netns_before[@]}"; do [[ $f != "$old" ]] || continue 2; done
		echo "$f"
	done
}

# stop <name> [seconds]: SIGTERM, wait, then SIGKILL, the recorded process.
stop() {
	local name=$1 secs=${2:-20} pid i
	pid=$(pid_of "$name")
	if [[ -n $pid ]]; then
		kill -TERM "$pid" 2>/dev/null
		for ((i = 0; i < secs * 10; i++)); do
			[[ -d /proc/$pid ]] || break
			sleep 0.1
		done
		if [[ -d /proc/$pid ]]; then
			kill -KILL "$pid" 2>/dev/null
			log "killed $name ($pid) after ${secs}s"
		else
			log "stopped $name ($pid)"
		fi
	fi
	rm -f "$RUN_DIR/$name.pid"
}

# The nodes up.sh recorded, node 1 (this host) first, and every component.
mapfile -t nodes < <(node_names)
mapfile -t components < <(all_components)

# 1. Processes the e2e suite recorded beside the cluster's (say a webhook run
#    on the host), then the controllers, so nothing recreates pods.
for f in "$RUN_DIR"/*.pid; do
	[[ -e $f ]] || continue
	n=$(basename "$f" .pid)
	[[ " ${components[*]} " == *" $n "* ]] || stop "$n" 10
done
stop kube-controller-manager &
stop kube-scheduler &
wait

# 2. Let the kubelets tear the pods down themselves (CNI DEL, volume
#    unmounts, cgroups): delete them all and wait until the API has none
#    left, which a kubelet only allows once their resources are reclaimed
#    (a minute at most: a pod whose kubelet is gone never goes). The agents
#    go last: a DRA node's kubelet needs its agent to unprepare the claims
#    of the pods it removes.
if [[ -n $(pid_of kubelet) && -n $(pid_of kube-apiserver) ]] && kubectl get --raw=/readyz >/dev/null 2>&1; then
	for selector in app!=migflex-agent app=migflex-agent; do
		kubectl delete pods --all-namespaces -l "$selector" --grace-period=0 --wait=false >/dev/null 2>&1
		for ((i = 0; i < 120; i++)); do
			[[ -z $(kubectl get pods --all-namespaces -l "$selector" -o name 2>/dev/null) ]] && break
			sleep 0.5
		done
	done
	[[ -n $(kubectl get pods --all-namespaces -o name 2>/dev/null) ]] || log "the kubelets removed all pods"
fi
for n in "${nodes[@]}"; do stop "$(node_component kubelet "$n")" & done
wait

# 3. Whatever containers remain, then each containerd and any shim left
#    serving its socket (shims outlive containerd by design).
for n in "${nodes[@]}"; do
	c=$(node_component containerd "$n")
	if [[ -n $(pid_of "$c") ]]; then
		for id in $(node_ctr "$n" containers ls -q 2>/dev/null); do
			node_ctr "$n" tasks kill -s SIGKILL "$id" >/dev/null 2>&1
			node_ctr "$n" tasks rm -f "$id" >/dev/null 2>&1
			node_ctr "$n" containers rm "$id" >/dev/null 2>&1
		done
	fi
	stop "$c"
done
sockets=("$CTRD_SOCK")
for n in "${nodes[@]:1}"; do sockets+=("$(node_dir "$n")/containerd/containerd.sock"); done
for p in /proc/[0-9]*; do
	args=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
	for sock in "${sockets[@]}"; do
		[[ $args == *"-address $sock "* ]] || continue
		kill -KILL "${p#/proc/}" 2>/dev/null && log "killed leftover shim ${p#/proc/}"
	done
done
# Pod processes orphaned by a killed shim live on in the kubelets' cgroups.
find /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/mfnode[0-9]*/kubepods -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u | while read -r pid; do
	kill -KILL "$pid" 2>/dev/null && log "killed leftover pod process $pid"
done
# Then the rest of each node: its apiproxy, and whatever else still runs in
# its namespaces (a test's nsenter, say), so that they can go.
for n in "${nodes[@]:1}"; do
	stop "apiproxy@$n" 5
	for pid in $(node_ns_pids "$n"); do
		kill -KILL "$pid" 2>/dev/null && log "killed process $pid left in node $n"
	done
done

# 4. Control plane. kube-apiserver may wait ~60s for open watches on SIGTERM;
#    a second SIGTERM makes it exit at once.
pid=$(pid_of kube-apiserver)
if [[ -n $pid ]]; then
	kill -TERM "$pid" 2>/dev/null
	for ((i = 0; i < 600; i++)); do
		[[ -d /proc/$pid ]] || break
		if ((i == 10)); then kill -TERM "$pid" 2>/dev/null; fi # after 1s
		sleep 0.1
	done
	if [[ -d /proc/$pid ]]; then
		kill -KILL "$pid" 2>/dev/null
		log "killed kube-apiserver ($pid) after 60s"
	else
		log "stopped kube-apiserver ($pid)"
	fi
fi
rm -f "$RUN_DIR/kube-apiserver.pid"
stop etcd

# 5. Mounts left by the kubelet and containerd (deepest first) and those of
#    the nodes' namespaces (the namespaces go with their last mount, and
#    their mounts and links with them), our network namespaces, the
#    bridges, cgroups.
mounts() {
	local ours m
	ours=$(our_netns)
	awk '{print $2}' /proc/mounts | sed 's/\\040/ /g' | while IFS= read -r m; do
		case $m in
		"$CLUSTER_DIR"/* | /var/lib/kubelet | /var/lib/kubelet/* | /run/containerd/*) echo "$m" ;;
		/run/netns/cni-*) if grep -qxF -- "$m" <<<"$ours"; then echo "$m"; fi ;;
		esac
	done | sort -r
}
for m in $(mounts); do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
for n in $(our_netns); do rm -f "$n" && log "removed network namespace ${n#/run/netns/}"; done
# A node's veth goes with its network namespace, unless something still
# holds that namespace: deleting the host's end takes the node's too.
for l in $(node_veths); do ip link del "$l" 2>/dev/null && log "removed link $l"; done
for b in "$BRIDGE" "$NODES_BRIDGE"; do
	ip link del "$b" 2>/dev/null && log "removed bridge $b"
done
find /sys/fs/cgroup/*/kubepods -depth -type d -exec rmdir {} + 2>/dev/null

# 6. Host settings up.sh recorded.
if [[ -d $HOST_DIR ]]; then
	while IFS= read -r line; do
		case $line in
		"route blackhole "*) ip route del blackhole "${line#route blackhole }" 2>/dev/null && log "removed blackhole route ${line#route blackhole }" ;;
		"route "*) ip route del "${line#route }" 2>/dev/null && log "removed route ${line#route }" ;;
		"link "*) ip link del "${line#link }" 2>/dev/null && log "removed link ${line#link }" ;;
		"cgroup "*)
			c=${line#cgroup }
			find /sys/fs/cgroup/*/"$c" -depth -type d -exec rmdir {} + 2>/dev/null
			log "removed cgroup $c"
			;;
		"chain "*)
			c=${line#chain }
			while iptables -D FORWARD -j "$c" 2>/dev/null; do :; done
			while iptables -D INPUT -j "$c" 2>/dev/null; do :; done
			iptables -F "$c" 2>/dev/null && iptables -X "$c" 2>/dev/null && log "removed iptables chain $c"
			;;
		"path "*) rm -rf "${line#path }" ;;
		# Shared with other runtimes: only if nothing of theirs is in it.
		"shared "*) rmdir "${line#shared }" 2>/dev/null ;;
		esac
	done <"$HOST_DIR/created"

	# iptables chains the kubelet created (KUBE-*) and that did not exist
	# before: drop the rules jumping to them, then the chains.
	for v in "" 6; do
		before=$HOST_DIR/ip${v}tables.before
		[[ -f $before ]] || continue
		for table in filter nat mangle; do
			now=$(ip${v}tables-save -t "$table" 2>/dev/null) || continue
			new_chains=$(comm -13 <(grep -oE '^:KUBE-[^ ]+' "$before" | sort -u) <(grep -oE '^:KUBE-[^ ]+' <<<"$now" | sort -u) | tr -d :)
			[[ -n $new_chains ]] || continue
			for c in $new_chains; do
				grep -E "^-A [^ ]+ .*-j $c( |$)" <<<"$now" | while read -r rule; do
					# "-A CHAIN spec" -> "-D CHAIN spec"; iptables-save quotes
					# comments like a shell, so eval splits the spec correctly.
					eval "ip${v}tables -t $table -D ${rule#-A }" 2>/dev/null
				done
			done
			for c in $new_chains; do ip${v}tables -t "$table" -F "$c" 2>/dev/null; done
			for c in $new_chains; do ip${v}tables -t "$table" -X "$c" 2>/dev/null; done
			log "removed ip${v}tables $table chains: ${new_chains//$'\n'/ }"
		done
	done

	while IFS='=' read -r k v; do
		[[ -n $k ]] || continue
		cur=$(sysctl -n "$k" 2>/dev/null) || continue
		if [[ $cur != "$v" ]]; then
			sysctl -q -w "$k=$v" && log "restored $k=$v (was $cur)"
		fi
	done <"$HOST_DIR/sysctl"
	mv "$HOST_DIR" "$HOST_DIR.restored.$(date +%s)"
fi

# 7. Bulky state; logs, PKI and kubeconfigs stay until the next up.sh.
rm -rf "$CTRD_DIR/root" "$CTRD_DIR/state" "$CTRD_DIR/runc" "$CLUSTER_DIR/etcd"
for n in "${nodes[@]:1}"; do
	rm -rf "$(node_dir "$n")"/{containerd/root,containerd/state,containerd/runc,kubelet}
done

# 8. Say plainly if anything is left.
left=0
for c in "${components[@]}"; do
	[[ -z $(pid_of "$c") ]] || { echo "down.sh: $c still running" >&2; left=1; }
done
if [[ -n $(mounts) ]]; then echo "down.sh: mounts remain: $(mounts | tr '\n' ' ')" >&2; left=1; fi
for b in "$BRIDGE" "$NODES_BRIDGE"; do
	if ip link show "$b" >/dev/null 2>&1; then echo "down.sh: bridge $b remains" >&2; left=1; fi
done
if [[ -n $(node_veths) ]]; then echo "down.sh: links remain: $(node_veths | tr '\n' ' ')" >&2; left=1; fi
if cg=$(compgen -G '/sys/fs/cgroup/*/mfnode[0-9]*'); then echo "down.sh: cgroups remain: $(tr '\n' ' ' <<<"$cg")" >&2; left=1; fi
if [[ -n $(our_netns) ]]; then echo "down.sh: network namespaces remain: $(our_netns | tr '\n' ' ')" >&2; left=1; fi
if [[ $left -ne 0 ]]; then exit 1; fi
# The nodes are gone: what a next up.sh makes is NODES' to say.
rm -f "$NODES_DIR/names"
log "down"
