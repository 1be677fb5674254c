#!/usr/bin/env bash
# Brings up a Kubernetes cluster on this machine, as root: etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, and NODES nodes
# (3 by default), each a containerd and a kubelet with pods on a private
# bridge. Node 1 is this host itself, with the control plane on 127.0.0.1;
# nodes 2..NODES each run in a network and a mount namespace of their own,
# joined to the host by a veth on a bridge (see "Nodes" in README.md).
# hack/cluster/down.sh undoes it. Settings: see lib.sh (NODES,
# CLUSTER_DIR, IMAGES_DIR, NODE_NAME, ...).
#
# Network safety: nothing the cluster does may send a packet off this machine.
# - There is no kube-proxy, so nothing routes Service ClusterIPs: the whole
#   service range gets a local blackhole route.
# - Pods get no default route (only their bridge subnet, and on nodes 2..N
#   the API server's address on node 1's bridge), and a FORWARD rule drops
#   anything that would leave the bridge anyway. A node's network namespace
#   has no default route either (only the nodes' bridge and its own pods'
#   bridge), and a FORWARD rule drops anything that would leave the nodes'
#   bridge on the host.
# - No cluster DNS; pods get a resolv.conf naming 127.0.0.1, not the host's
#   nameserver.
# - containerd runs with a dead proxy, so an image that is not imported fails
#   locally instead of being pulled from the internet; no component inherits
#   a proxy setting from this shell (lowercase ones included).
# - The API server dials webhooks at their endpoints (aggregator routing) or
#   at a url on 127.0.0.1; in-pod clients run hostNetwork with
#   KUBERNETES_SERVICE_HOST=127.0.0.1 KUBERNETES_SERVICE_PORT=6443, or on
#   the pod network with KUBERNETES_SERVICE_HOST=$POD_GATEWAY (the host's
#   address on the bridge). The API server listens on every address, and
#   an INPUT rule drops its port on anything but loopback and the bridges.
#   On nodes 2..N, an apiproxy in the node's network namespace answers on
#   127.0.0.1:6443 for host-network pods; pods on the pod network reach
#   POD_GATEWAY through the node, which routes it to the host.
set -euo pipefail
# shellcheck source=hack/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $EUID -eq 0 ]] || die "needs root (it runs a kubelet and changes host networking)"
check_cluster_dir
[[ $NODES =~ ^[1-9][0-9]?$ && $NODES -le 50 ]] || die "NODES=$NODES: want a number of nodes from 1 to 50"
mapfile -t NODE_NAMES < <(planned_node_names)

# --- prerequisites ---------------------------------------------------------
# containerd is built from the module proxy (build.sh), one version for
# every minor; runc and the CNI plugins are Debian's (see README.md).
"$ROOT/hack/install-debs.sh" runc:runc containernetworking-plugins:/usr/lib/cni/bridge \
	iptables:iptables conntrack:conntrack openssl:openssl curl:curl
"$HACK_CLUSTER/build.sh" >/dev/null
# Alone, node 1 is reached by its name (its kubelet listens on 127.0.0.1);
# with other nodes, at NODES_HOST_IP.
((NODES > 1)) || getent ahostsv4 "$NODE_NAME" | awk '{print $1}' | grep -qx 127.0.0.1 ||
	die "node name $NODE_NAME must resolve to 127.0.0.1 (the kubelet listens there); set NODE_NAME or add it to /etc/hosts"
[[ -z $(printf '%s\n' "${NODE_NAMES[@]}" | sort | uniq -d) ]] || die "NODE_NAME=$NODE_NAME is the name of another node: ${NODE_NAMES[*]}"
[[ -n $(ls "$IMAGES_DIR"/*.tar 2>/dev/null) ]] || die "no image tarballs in $IMAGES_DIR; run hack/cluster/images.sh first"

# --- refuse to run over anything (ours or another cluster) -----------------
# Exit status 3 means "refused, nothing changed": callers that tear down after
# a failed bring-up (e2e.sh) must not tear down a cluster they did not start.
refuse() { echo "$(basename "$0"): $*" >&2; exit 3; }
# One bring-up or tear-down at a time; the daemons must not inherit the lock
# (start() closes fd 8), and the down.sh a failed bring-up runs must not wait
# for it.
mkdir -p "$CACHE_DIR"
exec 8>"$CACHE_DIR/cluster.lock"
flock -n 8 || refuse "another hack/cluster/up.sh or down.sh is running"
export MIGFLEX_CLUSTER_LOCK_HELD=1
for c in $(all_components); do
	[[ -z $(pid_of "$c") ]] || refuse "$c is already running (PID $(pid_of "$c")); run hack/cluster/down.sh first"
done
if grep -q " $CLUSTER_DIR/" /proc/mounts; then refuse "mounts remain under $CLUSTER_DIR; run hack/cluster/down.sh first"; fi
for p in "${HOST_PATHS[@]}" /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/mfnode[0-9]*; do
	[[ ! -e $p ]] || refuse "$p exists: another kubelet/containerd, or a cluster that was not torn down (hack/cluster/down.sh)"
done
ip link show "$BRIDGE" >/dev/null 2>&1 && refuse "bridge $BRIDGE exists; run hack/cluster/down.sh first"
[[ -z $(ip route show "$SERVICE_CIDR") && -z $(ip route show "$POD_CIDR") ]] ||
	refuse "routes for $SERVICE_CIDR or $POD_CIDR exist; run hack/cluster/down.sh, or choose SERVICE_CIDR/POD_CIDR"
if ((NODES > 1)); then
	ip link show "$NODES_BRIDGE" >/dev/null 2>&1 && refuse "bridge $NODES_BRIDGE exists; run hack/cluster/down.sh first"
	[[ -z $(node_veths) ]] || refuse "links $(node_veths | tr '\n' ' ')exist; run hack/cluster/down.sh first"
	for ((i = 2; i <= NODES; i++)); do
		[[ -z $(ip route show "$(node_pod_cidr "$i")") ]] || refuse "a route for $(node_pod_cidr "$i") exists; run hack/cluster/down.sh, or choose POD_CIDR"
	done
	[[ -z $(ip route show "$NODES_NET.0/24") ]] || refuse "a route for $NODES_NET.0/24 exists; choose NODES_NET"
fi
for port in 2379 2380 2381 $APISERVER_PORT 10248 10250 10257 10259; do
	if ss -Hltn "sport = :$port" | grep -q .; then refuse "port $port on this host is in use"; fi
done

rm -rf "$CLUSTER_DIR"
mkdir -p "$RUN_DIR" "$LOG_DIR" "$HOST_DIR" "$PKI" "$CTRD_DIR" "$CDI_DIR" "$CLUSTER_DIR"/{cni/net.d,cni/ipam,kubelet} "$NODES_DIR"
printf '%s\n' "${NODE_NAMES[@]}" >"$NODES_DIR/names"

# A failed bring-up undoes itself, leaving the logs.
failed() {
	local rc=$?
	echo "up.sh failed (exit $rc); component log tails:" >&2
	for f in "$LOG_DIR"/*.log; do [[ -s $f ]] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }; done
	"$HACK_CLUSTER/down.sh" >&2 || true
	exit "$rc"
}
trap failed EXIT

# --- record the host settings this changes, before changing any ------------
# Per interface in sysctl's slash form, which keeps a dot in a name
# (eth0.100) literal.
ifaces=()
for d in /proc/sys/net/ipv4/conf/*; do
	d=${d##*/}
	[[ $d == all || $d == default ]] || ifaces+=("net/ipv4/conf/$d/forwarding")
done
for k in "${SYSCTLS[@]}" "${ifaces[@]}"; do
	v=$(sysctl -n "$k" 2>/dev/null) && echo "$k=$v"
done >"$HOST_DIR/sysctl"
iptables-save >"$HOST_DIR/iptables.before"
ip6tables-save >"$HOST_DIR/ip6tables.before" 2>/dev/null || true
# Network namespaces that exist now belong to someone else: down.sh removes
# only the cni-* ones this cluster's runtime adds.
for f in /run/netns/cni-*; do [[ -e $f ]] && echo "$f"; done >"$HOST_DIR/netns.before"
: >"$HOST_DIR/created" # host paths and routes to remove in down.sh

# --- network safety first ----------------------------------------------------
ip route add blackhole "$SERVICE_CIDR"
echo "route blackhole $SERVICE_CIDR" >>"$HOST_DIR/created"
iptables -N "$ISOLATION_CHAIN"
echo "chain $ISOLATION_CHAIN" >>"$HOST_DIR/created"
iptables -A "$ISOLATION_CHAIN" -i "$BRIDGE" ! -o "$BRIDGE" -j DROP
iptables -A "$ISOLATION_CHAIN" -s "$POD_CIDR" ! -o "$BRIDGE" -j DROP
if ((NODES > 1)); then
	# What comes from the nodes (their host networks and pods, routed by
	# their namespaces) may only go back to the nodes.
	iptables -A "$ISOLATION_CHAIN" -i "$NODES_BRIDGE" ! -o "$NODES_BRIDGE" -j DROP
fi
iptables -I FORWARD 1 -j "$ISOLATION_CHAIN"
iptables -N "$INPUT_CHAIN"
echo "chain $INPUT_CHAIN" >>"$HOST_DIR/created"
iptables -A "$INPUT_CHAIN" -i lo -j RETURN
iptables -A "$INPUT_CHAIN" -i "$BRIDGE" -j RETURN
((NODES == 1)) || iptables -A "$INPUT_CHAIN" -i "$NODES_BRIDGE" -j RETURN
iptables -A "$INPUT_CHAIN" -p tcp --dport "$APISERVER_PORT" -j DROP
iptables -I INPUT 1 -j "$INPUT_CHAIN"
if ((NODES == 1)); then
	log "blackholed $SERVICE_CIDR; pod traffic may not leave $BRIDGE; the API server answers only loopback and $BRIDGE"
else
	log "blackholed $SERVICE_CIDR; pod traffic may not leave $BRIDGE, nor the nodes' traffic $NODES_BRIDGE; the API server answers only loopback, $BRIDGE and $NODES_BRIDGE"
fi
# The webhook's replicas share one port on this host (--reuse-port, the
# local overlay). When one stops in a rollout and closes its listener, the
# kernel resets the connections still queued on it, which the API server
# then admits unchecked (failurePolicy Ignore), unless tcp_migrate_req hands
# them to another listener on the port (Linux 5.14). Without it the cluster
# still works; TestWebhookRolloutIsHitless then fails and says why.
sysctl -q -w net.ipv4.tcp_migrate_req=1 ||
	log "warning: cannot set net.ipv4.tcp_migrate_req=1 (Linux 5.14 or later): a webhook rollout may admit pods unchecked"
for p in "${HOST_PATHS[@]}"; do echo "path $p" >>"$HOST_DIR/created"; done
for p in "${SHARED_PATHS[@]}"; do [[ -e $p ]] || echo "shared $p" >>"$HOST_DIR/created"; done

# --- PKI ---------------------------------------------------------------------
# cert <name> <subject> <extensions>: a key and a CA-signed certificate.
cert() {
	openssl genrsa -out "$PKI/$1.key" 2048 2>/dev/null
	openssl req -new -key "$PKI/$1.key" -subj "$2" -out "$PKI/$1.csr" 2>/dev/null
	printf '%b' "$3" >"$PKI/$1.ext"
	openssl x509 -req -in "$PKI/$1.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
		-days 30 -extfile "$PKI/$1.ext" -out "$PKI/$1.crt" 2>/dev/null
}
# kubeconfig <user> [server address]: a kubeconfig for the admin or a
# component, certs embedded; the API server at 127.0.0.1 unless given.
kubeconfig() {
	local b64='base64 -w0'
	cat >"$CLUSTER_DIR/$1.kubeconfig" <<YAML
apiVersion: v1
kind: Config
clusters:
- name: migflex-local
  cluster:
    server: https://${2:-127.0.0.1}:$APISERVER_PORT
    certificate-authority-data: $($b64 <"$PKI/ca.crt")
users:
- name: $1
  user:
    client-certificate-data: $($b64 <"$PKI/$1.crt")
    client-key-data: $($b64 <"$PKI/$1.key")
contexts:
- name: migflex-local
  context: {cluster: migflex-local, user: $1}
current-context: migflex-local
YAML
	chmod 600 "$CLUSTER_DIR/$1.kubeconfig"
}
openssl genrsa -out "$PKI/ca.key" 2048 2>/dev/null
openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=migflex-local-ca" -days 30 -out "$PKI/ca.crt" 2>/dev/null
openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
# The nodes' kubelets reach the API server at NODES_HOST_IP.
nodes_san=
((NODES == 1)) || nodes_san=",IP:$NODES_HOST_IP"
cert apiserver "/CN=kube-apiserver" \
	"subjectAltName=IP:127.0.0.1,IP:$SERVICE_IP,IP:$POD_GATEWAY$nodes_san,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\nextendedKeyUsage=serverAuth\n"
cert admin "/O=system:masters/CN=migflex-admin" 'extendedKeyUsage=clientAuth\n'
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" 'extendedKeyUsage=clientAuth\n'
cert kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" 'extendedKeyUsage=clientAuth\n'
cert kube-controller-manager "/CN=system:kube-controller-manager" 'extendedKeyUsage=clientAuth\n'
cert kube-scheduler "/CN=system:kube-scheduler" 'extendedKeyUsage=clientAuth\n'
for u in admin kubelet kube-controller-manager kube-scheduler; do kubeconfig "$u"; done
for n in "${NODE_NAMES[@]:1}"; do
	cert "kubelet@$n" "/O=system:nodes/CN=system:node:$n" 'extendedKeyUsage=clientAuth\n'
	kubeconfig "kubelet@$n" "$NODES_HOST_IP"
done
log "PKI and kubeconfigs in $CLUSTER_DIR"

# --- nodes 2..N: namespaces, links, routes, cgroups --------------------------
# Each is made before any kubelet runs, so that its mount namespace copies
# none of node 1's pod mounts. The namespaces are files under NS_DIR (bind
# mounts of nsfs, on a private mount so that they do not propagate into the
# namespaces themselves); down.sh unmounts them once nothing runs in them.
if ((NODES > 1)); then
	# Node 1's pod bridge now, with its gateway address, which is where the
	# other nodes' pods reach the API server (routed through their node),
	# and the source address of the host's connections to them (so that
	# their one route back, to POD_GATEWAY, carries the answers). The CNI
	# bridge plugin takes a bridge that exists with its gateway address.
	ip link add "$BRIDGE" type bridge
	ip addr add "$POD_GATEWAY/${POD_CIDR#*/}" dev "$BRIDGE"
	ip link set "$BRIDGE" up
	ip link add "$NODES_BRIDGE" type bridge
	echo "link $NODES_BRIDGE" >>"$HOST_DIR/created"
	ip addr add "$NODES_HOST_IP/24" dev "$NODES_BRIDGE"
	ip link set "$NODES_BRIDGE" up
	mkdir -p "$NS_DIR" /var/lib/kubelet /var/lib/cni
	mount --bind "$NS_DIR" "$NS_DIR"
	mount --make-private "$NS_DIR"
	for ((i = 2; i <= NODES; i++)); do
		n=${NODE_NAMES[i - 1]}
		nd=$(node_dir "$n")
		mkdir -p "$nd"/{kubelet,log,cdi,pki,containerd,cni/net.d,cni/ipam,cni/lib}
		: >"$NS_DIR/$n.net"
		: >"$NS_DIR/$n.mnt"
		unshare --net="$NS_DIR/$n.net" --mount="$NS_DIR/$n.mnt" --propagation private true
		# The node's own /run (containerd's and the CNI's runtime state, pod
		# network namespaces), its kubelet's root, /var/log (pod logs and
		# /var/log/containers, which the kubelet hard-codes), /var/lib/cni
		# and the CDI directory the chart and components/dra default to,
		# /var/run/cdi: the kubelet and containerd hard-code those paths,
		# and the suite reads them on the host under nd. Inside, the copy
		# of NS_DIR goes: it would hold the namespaces of earlier nodes.
		nsenter --mount="$NS_DIR/$n.mnt" -- sh -ec "
			umount -R '$NS_DIR'
			mount -t tmpfs -o mode=0755 mfnode-run /run
			mkdir -p /run/cdi /run/containerd /run/netns /run/lock
			mount --bind '$nd/cdi' /run/cdi
			mount --bind '$nd/kubelet' /var/lib/kubelet
			mount --bind '$nd/log' /var/log
			mount --bind '$nd/cni/lib' /var/lib/cni"
		# eth0 in the node, mfveth<N> (node_veth) on the nodes' bridge; no default
		# route: the node knows the nodes' /24, its pods' bridge and, through
		# the host, POD_GATEWAY.
		nsenter --net="$NS_DIR/$n.net" -- ip link add eth0 type veth peer name "$(node_veth "$i")" netns $$
		ip link set "$(node_veth "$i")" master "$NODES_BRIDGE" up
		nsenter --net="$NS_DIR/$n.net" -- sh -ec "
			ip link set lo up
			ip addr add $(node_ip "$i")/24 dev eth0
			ip link set eth0 up
			ip route add $POD_GATEWAY/32 via $NODES_HOST_IP
			sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
			sysctl -qw net.ipv4.ip_forward=1
			sysctl -qw net.ipv4.tcp_migrate_req=1 || true"
		ip route add "$(node_pod_cidr "$i")" via "$(node_ip "$i")" dev "$NODES_BRIDGE" src "$POD_GATEWAY"
		echo "route $(node_pod_cidr "$i")" >>"$HOST_DIR/created"
		# cgroupRoot of its kubelet, so that two kubelets never share
		# kubepods; cpuset's need their CPUs and memory nodes before a child.
		echo "cgroup mfnode$i" >>"$HOST_DIR/created"
		for d in /sys/fs/cgroup/*/; do
			[[ ! -L ${d%/} && -e $d/cgroup.procs && $d != /sys/fs/cgroup/unified/ ]] || continue
			mkdir "$d/mfnode$i"
			[[ ! -e $d/cpuset.cpus ]] || { cat "$d/cpuset.cpus" >"$d/mfnode$i/cpuset.cpus" && cat "$d/cpuset.mems" >"$d/mfnode$i/cpuset.mems"; }
		done
	done
	log "nodes ${NODE_NAMES[*]:1}: namespaces in $NS_DIR, on $NODES_BRIDGE ($NODES_NET.0/24)"
fi

# --- processes ---------------------------------------------------------------
# start <name> [VAR=value...] <binary> <args...>: runs the binary in its own
# session with its log in LOG_DIR, without any inherited proxy setting
# (UNSET_PROXY_ENV) but with the VAR=value ones, recording the real PID
# (bash execs env, which execs the binary, keeping the PID) and the binary,
# so down.sh stops exactly this process. START_IN names the node whose
# namespaces it runs in (node 1, the host, when unset).
start() {
	local name=$1 vars=() wrap=()
	shift
	read -ra wrap <<<"$(node_enter "${START_IN:-$NODE_NAME}")"
	while [[ $1 =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; do
		vars+=("$1")
		shift
	done
	echo "$1" >"$RUN_DIR/$name.exe"
	# shellcheck disable=SC2016 # expanded by the inner bash
	setsid bash -c 'echo $$ >"$0"; exec "$@"' "$RUN_DIR/$name.pid" "${wrap[@]}" env "${UNSET_PROXY_ENV[@]}" "${vars[@]}" "$@" \
		</dev/null >"$LOG_DIR/$name.log" 2>&1 8>&- &
	local i
	for ((i = 0; i < 50; i++)); do [[ -s $RUN_DIR/$name.pid ]] && return 0; sleep 0.1; done
	die "$name did not start"
}
# waitfor <what> <tries of 0.5s> <command...>: polls until the command succeeds.
waitfor() {
	local what=$1 tries=$2 i
	shift 2
	for ((i = 0; i < tries; i++)); do
		"$@" >/dev/null 2>&1 && { log "$what"; return 0; }
		sleep 0.5
	done
	log "timed out waiting for: $what"
	return 1
}
alive() { [[ -n $(pid_of "$1") ]]; }

# The minor's feature gates (k8s/minors), the same for every component.
GATES=()
[[ -z $K8S_FEATURE_GATES ]] || GATES=(--feature-gates="$K8S_FEATURE_GATES")

start etcd "$ETCD_BIN/etcd" --name=migflex --data-dir="$CLUSTER_DIR/etcd" \
	--listen-client-urls=http://127.0.0.1:2379 --advertise-client-urls=http://127.0.0.1:2379 \
	--listen-peer-urls=http://127.0.0.1:2380 --initial-advertise-peer-urls=http://127.0.0.1:2380 \
	--initial-cluster=migflex=http://127.0.0.1:2380 --listen-metrics-urls=http://127.0.0.1:2381 \
	--unsafe-no-fsync=true
waitfor "etcd healthy" 120 curl -sf http://127.0.0.1:2381/health

# The API server reaches each kubelet (logs, exec) at the address the
# kubelet publishes: node 1's Hostname, which resolves to 127.0.0.1, alone;
# with more nodes every node's InternalIP (the others' names resolve
# nowhere), node 1's being NODES_HOST_IP.
address_types=Hostname,InternalIP
((NODES == 1)) || address_types=InternalIP,Hostname
start kube-apiserver "$K8S_BIN/kube-apiserver" \
	--etcd-servers=http://127.0.0.1:2379 \
	--bind-address=0.0.0.0 --secure-port="$APISERVER_PORT" --advertise-address=127.0.0.1 \
	--endpoint-reconciler-type=none \
	--tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" --client-ca-file="$PKI/ca.crt" \
	--service-account-issuer=https://kubernetes.default.svc.cluster.local \
	--service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
	--service-cluster-ip-range="$SERVICE_CIDR" \
	--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction --allow-privileged=true \
	--kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
	--kubelet-preferred-address-types="$address_types" \
	--enable-aggregator-routing=true \
	--cert-dir="$CLUSTER_DIR/apiserver-certs" --profiling=false "${GATES[@]}"
waitfor "kube-apiserver ready" 240 curl -sf --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
	"https://127.0.0.1:$APISERVER_PORT/readyz"

K=$CLUSTER_DIR/kube-controller-manager.kubeconfig
start kube-controller-manager "$K8S_BIN/kube-controller-manager" \
	--kubeconfig="$K" --authentication-kubeconfig="$K" --authorization-kubeconfig="$K" \
	--bind-address=127.0.0.1 --secure-port=10257 --cert-dir="$CLUSTER_DIR/kcm-certs" --leader-elect=false \
	--root-ca-file="$PKI/ca.crt" --service-account-private-key-file="$PKI/sa.key" --use-service-account-credentials=true \
	--cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" --profiling=false "${GATES[@]}"
K=$CLUSTER_DIR/kube-scheduler.kubeconfig
start kube-scheduler "$K8S_BIN/kube-scheduler" \
	--kubeconfig="$K" --authentication-kubeconfig="$K" --authorization-kubeconfig="$K" \
	--bind-address=127.0.0.1 --secure-port=10259 --leader-elect=false --profiling=false "${GATES[@]}"

# --- containerd --------------------------------------------------------------
# containerd_config <dir> <socket> <CDI dir> <CNI config dir>: containerd
# 2's configuration version 4 in <dir>/config.toml, with every path it
# would put on the host moved under <dir>: root, state, sockets, the opt
# and image-verifier plugin dirs, runc's state, and no drop-in imports
# from /etc/containerd/conf.d. NRI is off (it is on by default in 2.x and
# would listen on /var/run/nri/nri.sock); nothing here uses it. CDI specs
# come from <CDI dir> only. The shims' sockets go under <dir> too when the
# path fits a unix socket (the shim refuses one over 106 bytes: <dir>/s/<64
# hex digits>), and in containerd's default /run/containerd/s (a HOST_PATHS
# entry on node 1, removed by down.sh; the node's own /run on the others)
# when <dir> is too deep for that.
containerd_config() {
	local dir=$1 sock=$2 cdi=$3 cni=$4 shim_dir=$1/s
	if ((${#shim_dir} + 65 > 106)); then
		shim_dir=/run/containerd/s
		log "$dir is too long for containerd's shim sockets under it: they go to $shim_dir"
	fi
	cat >"$dir/config.toml" <<TOML
version = 4
root = "$dir/root"
state = "$dir/state"
imports = []
[plugins]
  [plugins.'io.containerd.server.v1.grpc']
    address = "$sock"
  [plugins.'io.containerd.server.v1.ttrpc']
    address = "$sock.ttrpc"
  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = "$shim_dir"
  [plugins.'io.containerd.internal.v1.opt']
    path = "$dir/opt"
  [plugins.'io.containerd.image-verifier.v1.bindir']
    bin_dir = "$dir/opt/image-verifier/bin"
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "lc.local/pause:1"
  [plugins.'io.containerd.cri.v1.runtime']
    # This VM lacks CAP_SYS_RESOURCE: runc cannot lower oom_score_adj (the
    # sandbox asks for -998) and every sandbox would fail without this.
    restrict_oom_score_adj = true
    # CDI is always on in containerd 2; specs only from here.
    cdi_spec_dirs = ["$cdi"]
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "$dir/runc"
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["/usr/lib/cni"]
      conf_dir = "$cni"
      max_conf_num = 1
TOML
}
# cni_config <file> <bridge> <subnet> <gateway> <IPAM dir> [route...]: the
# pods' network: no "routes" but those given (no default route), so a pod
# knows only its bridge's subnet and those; the node reaches its pods over
# the bridge directly.
cni_config() {
	local file=$1 br=$2 subnet=$3 gw=$4 ipam=$5 routes=
	shift 5
	local r
	for r in "$@"; do routes+="${routes:+, }{\"dst\": \"$r\"}"; done
	cat >"$file" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "migflex-harness",
  "plugins": [{
    "type": "bridge", "bridge": "$br", "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": "$subnet", "gateway": "$gw"}]], ${routes:+\"routes\": [$routes], }"dataDir": "$ipam"}
  }]
}
JSON
}
# import_images <node>: the image tarballs, into the node's containerd.
import_images() {
	local t
	for t in "$IMAGES_DIR"/*.tar; do node_ctr "$1" images import "$t" >/dev/null || return 1; done
}

containerd_config "$CTRD_DIR" "$CTRD_SOCK" "$CDI_DIR" "$CLUSTER_DIR/cni/net.d"
cni_config "$CLUSTER_DIR/cni/net.d/10-migflex.conflist" "$BRIDGE" "$POD_CIDR" "$POD_GATEWAY" "$CLUSTER_DIR/cni/ipam"
# Its own bin dir first in PATH: containerd finds the shim there, not a
# host's (Debian's containerd 1.6 ships one in /usr/bin).
start containerd "${DEAD_PROXY_ENV[@]}" "PATH=$CONTAINERD_BIN:$PATH" "$CONTAINERD_BIN/containerd" --config "$CTRD_DIR/config.toml"
# The nodes' containerds read /var/run/cdi, their own (a bind of
# <node dir>/cdi), and put their pods on a bridge of their own with one
# route besides: POD_GATEWAY, the API server.
for ((i = 2; i <= NODES; i++)); do
	n=${NODE_NAMES[i - 1]}
	nd=$(node_dir "$n")
	containerd_config "$nd/containerd" "$nd/containerd/containerd.sock" /var/run/cdi "$nd/cni/net.d"
	cni_config "$nd/cni/net.d/10-migflex.conflist" "$(node_bridge "$i")" "$(node_pod_cidr "$i")" "$(node_pod_gateway "$i")" "$nd/cni/ipam" "$POD_GATEWAY/32"
	START_IN=$n start "containerd@$n" "${DEAD_PROXY_ENV[@]}" "PATH=$CONTAINERD_BIN:$PATH" "$CONTAINERD_BIN/containerd" --config "$nd/containerd/config.toml"
	# Host-network pods on the node reach the API server at 127.0.0.1 too.
	START_IN=$n start "apiproxy@$n" "$CACHE_DIR/tools/apiproxy" -listen "127.0.0.1:$APISERVER_PORT" -to "$NODES_HOST_IP:$APISERVER_PORT"
done
waitfor "containerd $CONTAINERD_VERSION serving" 120 ctr version
# Said once here rather than by every ctr call (cgroup v1 on this kind of
# host; see README.md).
ctr deprecations list 2>/dev/null | awk 'NR > 1 { id = $1; $1 = $2 = ""; sub(/^ +/, ""); print "containerd deprecation " id ": " $0 }' || true
# Every node's images at once: the imports are I/O, mostly.
pids=()
for n in "${NODE_NAMES[@]}"; do
	waitfor "containerd of node $n serving" 120 node_ctr "$n" version
	import_images "$n" &
	pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || die "importing the images failed"; done
log "images: $(ctr images ls -q | grep -v '^sha256:' | tr '\n' ' ')"

# --- kubelet -----------------------------------------------------------------
# Pods with the default DNS policy get this instead of the host's resolver,
# which is off this machine.
printf 'nameserver 127.0.0.1\noptions timeout:1 attempts:1\n' >"$CLUSTER_DIR/kubelet/resolv.conf"
# kubelet_config <file> <address> <runtime socket> [cgroupRoot]: the
# kubelet's configuration, listening on <address> (its healthz on
# 127.0.0.1, the node's own loopback).
kubelet_config() {
	cat >"$1" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $2
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
containerRuntimeEndpoint: unix://$3
cgroupDriver: cgroupfs
failSwapOn: false
# This kind of machine runs the cgroup v1 hierarchy, which the kubelet
# refuses from 1.35 unless this is false (1.37 calls v1 unsupported, to be
# removed). Moving the host to cgroup v2 is not the harness's to do: the
# v1 controllers are in use by the machine's own processes, and a cgroup2
# mount over /sys/fs/cgroup would pull the hierarchy from under every other
# tool here. Production nodes should run cgroup v2 (docs/INSTALL.md).
failCgroupV1: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: AlwaysAllow}
clusterDomain: cluster.local
resolvConf: $CLUSTER_DIR/kubelet/resolv.conf
serializeImagePulls: false
# Images are imported, never pulled: never garbage-collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
# Both set: with only the update frequency, the report frequency would
# follow it and the kubelet would write its status that often.
nodeStatusUpdateFrequency: $KUBELET_NODE_STATUS_UPDATE_FREQUENCY
nodeStatusReportFrequency: 5m
YAML
	[[ -z ${4:-} ]] || echo "cgroupRoot: $4" >>"$1"
	if [[ -n $K8S_FEATURE_GATES ]]; then
		echo "featureGates:"
		tr ',' '\n' <<<"$K8S_FEATURE_GATES" | sed 's/^\(.*\)=\(.*\)$/  \1: \2/'
	fi >>"$1"
}
# Node 1 listens on 127.0.0.1, where its name resolves; with more nodes on
# NODES_HOST_IP, its InternalIP, where the API server then reaches it
# (the kubelet refuses a loopback node IP).
if ((NODES == 1)); then
	kubelet_config "$CLUSTER_DIR/kubelet/config.yaml" 127.0.0.1 "$CTRD_SOCK"
	node_ip_flag=()
else
	kubelet_config "$CLUSTER_DIR/kubelet/config.yaml" "$NODES_HOST_IP" "$CTRD_SOCK"
	node_ip_flag=(--node-ip="$NODES_HOST_IP")
fi
start kubelet "$K8S_BIN/kubelet" --config="$CLUSTER_DIR/kubelet/config.yaml" \
	--kubeconfig="$CLUSTER_DIR/kubelet.kubeconfig" --hostname-override="$NODE_NAME" "${node_ip_flag[@]}" \
	--root-dir=/var/lib/kubelet --cert-dir="$CLUSTER_DIR/kubelet/pki" --v=1
for ((i = 2; i <= NODES; i++)); do
	n=${NODE_NAMES[i - 1]}
	nd=$(node_dir "$n")
	kubelet_config "$nd/kubelet.yaml" "$(node_ip "$i")" "$nd/containerd/containerd.sock" "/mfnode$i"
	labels=()
	[[ " ${DRA_NODE_NUMBERS[*]} " != *" $i "* ]] || labels=(--node-labels="$DRA_NODE_LABEL")
	START_IN=$n start "kubelet@$n" "$K8S_BIN/kubelet" --config="$nd/kubelet.yaml" \
		--kubeconfig="$CLUSTER_DIR/kubelet@$n.kubeconfig" --hostname-override="$n" --node-ip="$(node_ip "$i")" "${labels[@]}" \
		--root-dir=/var/lib/kubelet --cert-dir="$nd/pki" --v=1
done
for n in "${NODE_NAMES[@]}"; do
	waitfor "node $n Ready" 240 kubectl wait --for=condition=Ready "node/$n" --timeout=1s
done
waitfor "kubelet device-plugin socket" 120 test -S /var/lib/kubelet/device-plugins/kubelet.sock
for n in "${NODE_NAMES[@]:1}"; do
	waitfor "kubelet device-plugin socket of node $n" 120 test -S "$(node_dir "$n")/kubelet/device-plugins/kubelet.sock"
done
# Node 1 runs the control plane: the local overlay keeps the webhook there,
# where its metrics are on this host's loopback.
kubectl label node "$NODE_NAME" node-role.kubernetes.io/control-plane= >/dev/null
waitfor "default ServiceAccount" 120 kubectl get serviceaccount default -n default
for c in $(all_components); do
	alive "$c" || { echo "$c exited; see $LOG_DIR/$c.log" >&2; false; }
done
# What runs here, for tests and tools: `source $CLUSTER_ENV`.
cat >"$CLUSTER_ENV" <<ENV
export KUBECONFIG=$KUBECONFIG_ADMIN
export KUBECTL=$K8S_BIN/kubectl
export K8S_VERSION=$K8S_VERSION
export K8S_FEATURE_GATES=$K8S_FEATURE_GATES
export CONTAINERD_VERSION=$CONTAINERD_VERSION
export CONTAINERD_ADDRESS=$CTRD_SOCK
export MIGFLEX_CDI_DIR=$CDI_DIR
export POD_APISERVER_HOST=$POD_GATEWAY
export MIGFLEX_CLUSTER_DIR=$CLUSTER_DIR
export MIGFLEX_NODES="${NODE_NAMES[*]}"
ENV
trap - EXIT
log "cluster up (Kubernetes $K8S_VERSION${K8S_FEATURE_GATES:+ with $K8S_FEATURE_GATES}, containerd $CONTAINERD_VERSION, nodes ${NODE_NAMES[*]}); logs in $LOG_DIR"
log "its settings: source $CLUSTER_ENV"
echo "export KUBECONFIG=$KUBECONFIG_ADMIN"
