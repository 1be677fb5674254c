# shellcheck shell=bash disable=SC2034 # the scripts sourcing this use its variables
# Shared settings for the local-cluster scripts; sourced, not run.
# Every setting is an environment variable with a default.

HACK_CLUSTER=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HACK_CLUSTER/../.." && pwd)
CACHE_DIR=${CACHE_DIR:-$ROOT/.cache}
# All state of one cluster: PKI, etcd data, containerd root, logs, PIDs, the
# record of host settings to restore. Wiped by the next up.sh.
CLUSTER_DIR=${CLUSTER_DIR:-$CACHE_DIR/cluster}
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
# Components in start order; down.sh stops them in reverse.
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet)

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
