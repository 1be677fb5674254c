#!/usr/bin/env bash
# Restarts one process of the cluster hack/cluster/up.sh brought up, as
# root, as an operator's `systemctl restart` would: stops the process up.sh
# recorded (SIGTERM, then SIGKILL after 30 s) and starts the same binary
# with the same arguments, in the same namespaces, appending to its log and
# recording the new PID for down.sh. Returns once the new one answers.
#
#   hack/cluster/restart.sh kubelet [NODE]       node 1 when no node is named
#   hack/cluster/restart.sh containerd [NODE]
#   hack/cluster/restart.sh apiproxy NODE        nodes after the first
#   hack/cluster/restart.sh kube-apiserver       etcd, kube-controller-manager,
#                                                kube-scheduler likewise
#
# Pods keep running through a kubelet's or a containerd's restart, as with
# real ones. On start the kubelet deletes every socket in its device-plugin
# directory and creates a new kubelet.sock, so device plugins must notice
# and register again: the end-to-end suite uses this to test that.
set -euo pipefail
# shellcheck source=hack/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $EUID -eq 0 ]] || die "needs root"
check_cluster_dir
(($# == 1 || $# == 2)) || die "usage: $(basename "$0") COMPONENT [NODE]"
component=$1
case $component in
kubelet | containerd | apiproxy)
	node=${2:-$(node_names | head -n1)}
	[[ -n $(node_number "$node") ]] || die "no node $node in this cluster (nodes: $(node_names | tr '\n' ' '))"
	name=$(node_component "$component" "$node")
	;;
etcd | kube-apiserver | kube-controller-manager | kube-scheduler)
	(($# == 1)) || die "$component runs on this host, not on a node"
	node=$(node_names | head -n1)
	name=$component
	;;
*) die "unknown component $component (kubelet, containerd, apiproxy, etcd, kube-apiserver, kube-controller-manager, kube-scheduler)" ;;
esac
[[ $name != apiproxy ]] || die "node 1 has no apiproxy: it is the host, where the API server listens"
read -ra wrap <<<"$(node_enter "$node")"
# Not while up.sh or down.sh works on the cluster (their lock); the new
# process must not inherit it.
mkdir -p "$CACHE_DIR"
exec 8>"$CACHE_DIR/cluster.lock"
flock -w 600 8 || die "another hack/cluster/up.sh or down.sh has held $CACHE_DIR/cluster.lock for 10 minutes"
old=$(pid_of "$name")
[[ -n $old ]] || die "no $name started by hack/cluster/up.sh is running (no live PID in $RUN_DIR/$name.pid)"

# The command line of the running process is exactly what up.sh started;
# its environment is what start() gave it (the dead proxy, containerd's
# PATH), less what it unset.
mapfile -d '' args <"/proc/$old/cmdline"
((${#args[@]} > 0)) || die "cannot read the command line of $name from /proc/$old/cmdline"
vars=()
case $component in
containerd) vars=("${DEAD_PROXY_ENV[@]}" "PATH=$CONTAINERD_BIN:$PATH") ;;
esac

kill -TERM "$old"
for ((i = 0; i < 300; i++)); do
	[[ -d /proc/$old ]] || break
	# kube-apiserver waits for open watches on the first SIGTERM; a second
	# one makes it exit at once.
	if ((i == 10)) && [[ $component == kube-apiserver ]]; then kill -TERM "$old" 2>/dev/null || true; fi
	sleep 0.1
done
if [[ -d /proc/$old ]]; then
	kill -KILL "$old" 2>/dev/null || true
	log "killed $name ($old) after 30s"
fi
log "stopped $name ($old)"

# As up.sh's start(): its own session, in the node's namespaces, no
# inherited proxy setting, the PID written by the shell that then execs
# (nsenter, which execs) env, which execs the binary, so the recorded PID is
# the process's.
rm -f "$RUN_DIR/$name.pid"
echo "--- restarted by $(basename "$0") at $(date -u +%FT%TZ)" >>"$LOG_DIR/$name.log"
# shellcheck disable=SC2016 # expanded by the inner bash
setsid bash -c 'echo $$ >"$0"; exec "$@"' "$RUN_DIR/$name.pid" "${wrap[@]}" env "${UNSET_PROXY_ENV[@]}" "${vars[@]}" "${args[@]}" \
	</dev/null >>"$LOG_DIR/$name.log" 2>&1 8>&- &
# The PID file is written just before the exec: wait until that PID runs
# the binary (pid_of checks).
new=
for ((i = 0; i < 100; i++)); do
	new=$(pid_of "$name")
	[[ -n $new ]] && break
	sleep 0.1
done
[[ -n $new ]] || die "$name did not start again; see $LOG_DIR/$name.log"

# answers: the new process serves, where it serves (a node's own loopback
# for its kubelet and apiproxy).
answers() {
	case $component in
	kubelet) "${wrap[@]}" curl -sf http://127.0.0.1:10248/healthz ;;
	containerd) node_ctr "$node" version ;;
	# Any HTTP answer, 401 included, has crossed the proxy.
	apiproxy) "${wrap[@]}" curl -sk -o /dev/null "https://127.0.0.1:$APISERVER_PORT/readyz" ;;
	etcd) curl -sf http://127.0.0.1:2381/health ;;
	kube-apiserver) curl -sf --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "https://127.0.0.1:$APISERVER_PORT/readyz" ;;
	kube-controller-manager) curl -sk -o /dev/null https://127.0.0.1:10257/healthz ;;
	kube-scheduler) curl -sk -o /dev/null https://127.0.0.1:10259/healthz ;;
	esac
}
for ((i = 0; i < 240; i++)); do
	if answers >/dev/null 2>&1; then
		log "$name restarted ($old -> $new)"
		exit 0
	fi
	[[ -n $(pid_of "$name") ]] || die "the new $name ($new) exited; see $LOG_DIR/$name.log"
	sleep 0.5
done
die "the new $name ($new) does not answer after 120s; see $LOG_DIR/$name.log"
