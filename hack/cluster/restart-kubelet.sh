#!/usr/bin/env bash
# Restarts the kubelet of the cluster hack/cluster/up.sh brought up, as an
# operator's `systemctl restart kubelet` would, as root: stops the process
# up.sh recorded (SIGTERM; pods keep running, as with a real kubelet) and
# starts the same binary with the same arguments, appending to its log and
# recording the new PID for down.sh. Returns once the new kubelet answers
# its healthz. On start the kubelet deletes every socket in its
# device-plugin directory and creates a new kubelet.sock, so device plugins
# must notice and register again: the end-to-end suite uses this to test
# that.
set -euo pipefail
# shellcheck source=hack/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $EUID -eq 0 ]] || die "needs root"
check_cluster_dir
# Not while up.sh or down.sh works on the cluster (their lock); the new
# kubelet must not inherit it.
mkdir -p "$CACHE_DIR"
exec 8>"$CACHE_DIR/cluster.lock"
flock -w 600 8 || die "another hack/cluster/up.sh or down.sh has held $CACHE_DIR/cluster.lock for 10 minutes"
old=$(pid_of kubelet)
[[ -n $old ]] || die "no kubelet started by hack/cluster/up.sh is running (no live PID in $RUN_DIR/kubelet.pid)"

# The command line of the running kubelet is exactly what up.sh started.
mapfile -d '' args <"/proc/$old/cmdline"
((${#args[@]} > 0)) || die "cannot read the kubelet's command line from /proc/$old/cmdline"

kill -TERM "$old"
for ((i = 0; i < 300; i++)); do
	[[ -d /proc/$old ]] || break
	sleep 0.1
done
if [[ -d /proc/$old ]]; then
	kill -KILL "$old" 2>/dev/null || true
	log "killed kubelet ($old) after 30s"
fi
log "stopped kubelet ($old)"

# As up.sh's start(): its own session, no inherited proxy setting, the PID
# written by the shell that then execs env, which execs the binary, so the
# recorded PID is the kubelet's.
rm -f "$RUN_DIR/kubelet.pid"
echo "--- restarted by $(basename "$0") at $(date -u +%FT%TZ)" >>"$LOG_DIR/kubelet.log"
# shellcheck disable=SC2016 # expanded by the inner bash
setsid bash -c 'echo $$ >"$0"; exec "$@"' "$RUN_DIR/kubelet.pid" env "${UNSET_PROXY_ENV[@]}" "${args[@]}" \
	</dev/null >>"$LOG_DIR/kubelet.log" 2>&1 8>&- &
# The PID file is written just before the exec: wait until that PID runs
# the kubelet binary (pid_of checks).
new=
for ((i = 0; i < 100; i++)); do
	new=$(pid_of kubelet)
	[[ -n $new ]] && break
	sleep 0.1
done
[[ -n $new ]] || die "the kubelet did not start again; see $LOG_DIR/kubelet.log"

for ((i = 0; i < 240; i++)); do
	if curl -sf http://127.0.0.1:10248/healthz >/dev/null 2>&1; then
		log "kubelet restarted ($old -> $new)"
		exit 0
	fi
	[[ -n $(pid_of kubelet) ]] || die "the new kubelet ($new) exited; see $LOG_DIR/kubelet.log"
	sleep 0.5
done
die "the new kubelet ($new) is not healthy after 120s; see $LOG_DIR/kubelet.log"
