# shellcheck shell=bash disable=SC2034 # the scripts sourcing this use its variables
# Shared settings for the local-cluster scripts; sourced, not run.
# Every setting is an environment variable with a default.

HACK_CLUSTER=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HACK_CLUSTER/../.." && pwd)
CACHE_DIR=${CACHE_DIR:-$ROOT/.cache}
# All state of one cluster: PKI, etcd data, containerd root, logs, PIDs, the
# record of host settings to restore. Wiped by the next up.sh.
CLUSTER_DIR=${CLUSTER_DIR:-$CACHE_DIR/cluster}
# Without symbolic links, as /proc/mounts names the mounts under it (a
# worktree's .cache may be a link to another checkout's).
CLUSTER_DIR=$(realpath -m -- "$CLUSTER_DIR")
# Image tarballs that up.sh imports into containerd (hack/cluster/images.sh).
IMAGES_DIR=${IMAGES_DIR:-$CACHE_DIR/images}
# The node name must resolve to 127.0.0.1: the API server reaches the kubelet
# (kubectl logs/exec) at the node's Hostname address and the kubelet listens
# on 127.0.0.1 only. Default: the host name if it does, else "localhost".
if [[ -z ${NODE_NAME:-} ]]; then
	NODE_NAME=$(hostname | tr '[:upper:]' '[:lower:]')
	getent ahostsv4 "$NODE_NAME" | awk '{print $1}' | grep -qx 127.0.0.1 || NODE_NAME=localhost
fi
# Services: nothing routes these (no kube-proxy); up.sh blackholes the range
# so a stray ClusterIP packet dies here instead of leaving the machine.
SERVICE_CIDR=${SERVICE_CIDR:-10.96.0.0/24}
SERVICE_IP=${SERVICE_IP:-10.96.0.1}
# Pods: a bridge of our own with no route out (see the CNI config in up.sh).
POD_CIDR=${POD_CIDR:-10.88.0.0/24}
BRIDGE=${BRIDGE:-mfcni0}
# The host's address on the bridge (the first of POD_CIDR, the CNI
# gateway): pods on the pod network reach the API server there, as they
# would reach the kubernetes Service in a cluster with kube-proxy.
POD_GATEWAY=${POD_GATEWAY:-${POD_CIDR%.*}.1}
APISERVER_PORT=6443
# How often the kubelet updates its Node's status, and so publishes a new
# device-plugin layout in its allocatable: the kubelet's own default unless
# set (measurements of what the period costs set it lower).
KUBELET_NODE_STATUS_UPDATE_FREQUENCY=${KUBELET_NODE_STATUS_UPDATE_FREQUENCY:-10s}
# Nodes: how many, node 1 first. Node 1 is this host itself (its
# namespaces, NODE_NAME, pods on BRIDGE). Nodes 2..NODES are each a host
# made of namespaces: a network namespace joined to this host by a veth on
# NODES_BRIDGE, and a mount namespace with private /run, /var/lib/kubelet,
# /var/log and /var/lib/cni, in which a containerd, a kubelet and the
# apiproxy of their own run (see "Nodes" in README.md). NODES=1 is the
# single-node cluster.
NODES=${NODES:-3}
# The names of nodes 2, 3, ...; those past the list are mf-node<N>. The
# local overlay gives each its simulated GPUs by name
# (deployments/kustomize/overlays/local/sim-config-local.yaml).
EXTRA_NODE_NAMES=(mf-dra mf-b200)
# The nodes that register with DRA_NODE_LABEL, by number: the local overlay
# and the chart (agent.draNodeSelector) serve them through DRA.
DRA_NODE_NUMBERS=(2)
DRA_NODE_LABEL=migflex.io/serve=dra
# The bridge on this host that the nodes' veths join, and its /24: this
# host is .1 (where the nodes reach the API server), node N is .N.
NODES_BRIDGE=${NODES_BRIDGE:-mfnodes}
NODES_NET=${NODES_NET:-10.99.0}
NODES_HOST_IP=$NODES_NET.1
# Node N's pods: POD_CIDR's /16 with N as the third byte (10.88.N.0/24 by
# default), on a bridge of its own in its network namespace.
# The chain up.sh puts in front of FORWARD to drop pod traffic leaving the bridge.
ISOLATION_CHAIN=MIGFLEX-HARNESS
# The chain up.sh puts in front of INPUT: the API server listens on every
# address (so that pods reach it at POD_GATEWAY) but answers only loopback
# and the bridge.
INPUT_CHAIN=MIGFLEX-HARNESS-IN

# shellcheck source=hack/cluster/versions.sh
source "$HACK_CLUSTER/versions.sh"
ETCD_VERSION=$(modversion "$HACK_CLUSTER/etcd/go.mod" go.etcd.io/etcd/server/v3)
ETCD_BIN=$CACHE_DIR/etcd/$ETCD_VERSION/bin

RUN_DIR=$CLUSTER_DIR/run       # <component>.pid
LOG_DIR=$CLUSTER_DIR/logs      # <component>.log
HOST_DIR=$CLUSTER_DIR/host     # what up.sh changed on the host, for down.sh
PKI=$CLUSTER_DIR/pki
KUBECONFIG_ADMIN=$CLUSTER_DIR/admin.kubeconfig
CTRD_DIR=$CLUSTER_DIR/containerd
CTRD_SOCK=$CTRD_DIR/containerd.sock
# CDI specs (cdi.k8s.io): containerd reads them from here only, not from the
# host's /etc/cdi and /var/run/cdi, so a test or the agent that writes one
# touches nothing outside CLUSTER_DIR. e2e.sh exports it as MIGFLEX_CDI_DIR.
CDI_DIR=$CLUSTER_DIR/cdi
# What the cluster runs, for tests and tools: KUBECONFIG, KUBECTL,
# K8S_VERSION, MIGFLEX_CDI_DIR, ... as `export` lines (up.sh writes it).
CLUSTER_ENV=$CLUSTER_DIR/env
# Host paths the kubelet and containerd use whatever we configure. up.sh
# refuses to run when any already exists (another cluster's), and down.sh
# removes those up.sh found absent.
HOST_PATHS=(/var/lib/kubelet /var/log/pods /var/log/containers /var/lib/cni /run/containerd)
# Shared host paths the runtime may create: down.sh removes only our entries
# in them, then the directory if up.sh found it absent and it is empty.
SHARED_PATHS=(/run/netns)
# Sysctls this cluster may change; up.sh records them and down.sh writes the
# old values back. The kubelet sets the six vm.* and kernel.* ones at start
# wherever they differ from what it wants (setupKernelTunables in
# pkg/kubelet/cm/container_manager_linux.go: overcommit_memory=1,
# panic_on_oom=0, panic=10, panic_on_oops=1, keys.root_maxkeys=1000000,
# keys.root_maxbytes=25000000); the CNI bridge plugin sets ip_forward; the
# rest are recorded in case a runtime or plugin turns them on, except
# tcp_migrate_req, which up.sh sets.
# Setting ip_forward also makes the kernel set conf.all.accept_redirects to
# its opposite and every conf.<interface>.forwarding (default included) to
# it, so those follow it here (down.sh restores in this order), and up.sh
# adds each existing interface's forwarding.
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
	kernel.keys.root_maxkeys kernel.keys.root_maxbytes
	net.ipv4.ip_forward net.ipv4.conf.all.accept_redirects net.ipv4.conf.default.forwarding
	net.ipv6.conf.all.forwarding net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
	net.ipv4.tcp_migrate_req)
# Proxy settings no component may inherit (start() in up.sh and
# restart-kubelet.sh run every one through `env` with these): Go's net/http
# reads HTTP_PROXY, HTTPS_PROXY and NO_PROXY, each falling back to its
# lowercase twin when empty or unset. An inherited no_proxy=* would let
# containerd pull around its dead proxy, and an inherited real proxy would
# carry the API server's calls to webhook pod IPs off this machine.
UNSET_PROXY_ENV=(-u http_proxy -u https_proxy -u no_proxy -u all_proxy
	-u HTTP_PROXY -u HTTPS_PROXY -u NO_PROXY -u ALL_PROXY)
# containerd's own: a proxy nobody listens on, for every host, so an image
# that was not imported fails here instead of being pulled from the internet.
DEAD_PROXY_ENV=(HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 NO_PROXY=)
# Components in start order; down.sh stops them in reverse. A node after
# the first runs NODE_COMPONENTS, each named <component>@<node> (its PID
# file, log, ...): see all_components.
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet)
NODE_COMPONENTS=(containerd apiproxy kubelet)
# Per node after the first: $NODES_DIR/<name>/ holds its kubelet's root
# directory (kubelet/, /var/lib/kubelet in the node), its containerd's
# root, state and sockets (containerd/), its CNI config and IPAM state
# (cni/), its CDI specs (cdi/, /var/run/cdi in the node), /var/log
# (log/); $NS_DIR holds its namespaces, <name>.net and <name>.mnt, as
# files (bind mounts that keep them while nothing runs in them). up.sh
# writes the node names, node 1 first, to $NODES_DIR/names.
NODES_DIR=$CLUSTER_DIR/nodes
NS_DIR=$NODES_DIR/ns

T0=${T0:-$SECONDS}
log() { echo "[$(basename "$0") $((SECONDS - T0))s] $*"; }
die() { echo "$(basename "$0"): $*" >&2; exit 1; }

kubectl() { "$K8S_BIN/kubectl" --kubeconfig="$KUBECONFIG_ADMIN" "$@"; }
# The ctr built with this containerd, never the host's. Every call would
# print containerd's deprecation notices (cgroup v1 on this kind of host) on
# stderr; up.sh logs them once instead.
ctr() { CONTAINERD_SUPPRESS_DEPRECATION_WARNINGS=1 "$CONTAINERD_BIN/ctr" --address "$CTRD_SOCK" -n k8s.io "$@"; }

# pid_of <component>: its recorded PID if that process is still the one we
# started (the PID may have been reused after it died), else nothing.
pid_of() {
	local f=$RUN_DIR/$1.pid pid
	[[ -s $f ]] || return 0
	pid=$(<"$f")
	[[ $pid =~ ^[0-9]+$ ]] || return 0
	[[ -r $RUN_DIR/$1.exe && -r /proc/$pid/cmdline ]] || return 0
	local want
	want=$(<"$RUN_DIR/$1.exe")
	# The first word of the command line is the binary we exec'd.
	[[ $(tr '\0' '\n' <"/proc/$pid/cmdline" | head -n1) == "$want" ]] && echo "$pid"
	return 0
}

# The state dir is removed with rm -rf; refuse anything that is not clearly ours.
check_cluster_dir() {
	case $CLUSTER_DIR in
	"" | / | /root | /home | /tmp | /var | /usr | /etc | "$ROOT") die "refusing CLUSTER_DIR=$CLUSTER_DIR" ;;
	esac
	[[ $CLUSTER_DIR == /* ]] || die "CLUSTER_DIR must be absolute, got $CLUSTER_DIR"
}

# --- nodes -------------------------------------------------------------------
# node_names: the names of the nodes, node 1 first, one a line: those of
# the cluster up.sh brought up (it records them), else those NODES makes.
node_names() {
	if [[ -s $NODES_DIR/names ]]; then cat "$NODES_DIR/names"; else planned_node_names; fi
}
# planned_node_names: the names of the NODES nodes a new cluster gets.
planned_node_names() {
	local i
	echo "$NODE_NAME"
	for ((i = 2; i <= NODES; i++)); do extra_node_name "$i"; done
}
# extra_node_name <N>: the name of node N (2 or more).
extra_node_name() {
	local i=$1
	if ((i - 2 < ${#EXTRA_NODE_NAMES[@]})); then echo "${EXTRA_NODE_NAMES[i - 2]}"; else echo "mf-node$i"; fi
}
# node_number <name>: N for node N, nothing for a name that is no node.
node_number() {
	node_names | awk -v n="$1" '$1 == n { print NR; exit }'
}
node_ip() { echo "$NODES_NET.$1"; }
node_pod_cidr() { echo "${POD_CIDR%.*.*}.$1.0/24"; }
node_pod_gateway() { echo "${POD_CIDR%.*.*}.$1.1"; }
node_bridge() { echo "mfcni$1"; }
# node_veth <N>: the host's end of node N's veth, on NODES_BRIDGE.
node_veth() { echo "mfveth$1"; }
# node_veths: the host's ends of the nodes' veths that exist now, whatever
# cluster made them (deleting one deletes its peer in the node too).
node_veths() {
	ip -o link show type veth 2>/dev/null | awk -F': ' '{ sub(/@.*/, "", $2); if ($2 ~ /^mfveth[0-9]+$/) print $2 }'
}
node_dir() { echo "$NODES_DIR/$1"; }
# node_component <component> <name>: the name a component of the node goes
# by (PID file, log): node 1's are the cluster's own.
node_component() {
	if [[ $(node_number "$2") == 1 ]]; then echo "$1"; else echo "$1@$2"; fi
}
# all_components: every component of the cluster in start order, those of
# the nodes after the first included.
all_components() {
	local n c
	printf '%s\n' "${COMPONENTS[@]}"
	node_names | tail -n +2 | while read -r n; do
		for c in "${NODE_COMPONENTS[@]}"; do echo "$c@$n"; done
	done
}
# node_enter <name>: the command prefix that runs a command in the node's
# namespaces (none for node 1, the host). nsenter execs the command, so a
# PID recorded before it is the command's.
node_enter() {
	[[ $(node_number "$1") != 1 ]] || return 0
	echo nsenter --net="$NS_DIR/$1.net" --mount="$NS_DIR/$1.mnt" --
}
# node_ns_pids <name>: the processes in the node's network or mount
# namespace, whoever started them.
node_ns_pids() {
	local f ns inodes=() p
	for f in "$NS_DIR/$1.net" "$NS_DIR/$1.mnt"; do
		[[ -e $f ]] || continue
		grep -q " $f " /proc/mounts || continue
		ns=$(stat -L -c %i "$f" 2>/dev/null) && inodes+=("$ns")
	done
	((${#inodes[@]})) || return 0
	for p in /proc/[0-9]*; do
		for f in net mnt; do
			ns=$(readlink "$p/ns/$f" 2>/dev/null) || continue
			ns=${ns#*[}
			ns=${ns%]}
			if [[ " ${inodes[*]} " == *" $ns "* ]]; then
				echo "${p#/proc/}"
				break
			fi
		done
	done
}
# node_ctr <name> <ctr args...>: ctr on the node's containerd.
node_ctr() {
	local n=$1
	shift
	if [[ $(node_number "$n") == 1 ]]; then
		ctr "$@"
	else
		CONTAINERD_SUPPRESS_DEPRECATION_WARNINGS=1 "$CONTAINERD_BIN/ctr" --address "$(node_dir "$n")/containerd/containerd.sock" -n k8s.io "$@"
	fi
}

