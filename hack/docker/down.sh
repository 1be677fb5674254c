#!/usr/bin/env bash
# Stops the engine hack/docker/up.sh started (its containers with it) and
# removes its network namespace, which takes Docker's bridges and iptables
# rules along. Idempotent. Images stay in $DOCKER_DATA for the next run;
# PURGE=1 removes them too.
set -euo pipefail
# shellcheck source=hack/docker/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ $EUID -eq 0 ]] || die "needs root"

pid=$(dockerd_pid)
if [[ -n $pid ]]; then
	# Containers first, so their mounts and shims go with them.
	mapfile -t ids < <(d ps -aq 2>/dev/null || true)
	((${#ids[@]} == 0)) || d rm -f "${ids[@]}" >/dev/null 2>&1 || true
	kill -TERM "$pid"
	for ((i = 0; i < 60; i++)); do [[ -d /proc/$pid ]] || break; sleep 0.5; done
	[[ ! -d /proc/$pid ]] || { kill -KILL "$pid"; log "dockerd killed"; }
	log "dockerd stopped"
fi
# The containers' nameserver (up.sh), by the PID it recorded.
if [[ -s $DOCKER_RUN/refusedns.pid ]]; then
	pid=$(<"$DOCKER_RUN/refusedns.pid")
	if [[ $pid =~ ^[0-9]+$ && $(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -n1) == "$DOCKER_RUN/refusedns" ]]; then
		kill -TERM "$pid" && log "nameserver stopped"
	fi
fi
# containerd and its shims exit after dockerd; a killed dockerd leaves them.
for ((i = 0; i < 20; i++)); do
	[[ -n $(pgrep -f "$DOCKER_RUN/exec/" || true) ]] || break
	sleep 0.5
done
for p in $(pgrep -f "$DOCKER_RUN/exec/" || true); do
	[[ $p != "$$" ]] && kill -KILL "$p" 2>/dev/null && log "killed leftover $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-80)"
done
# Mounts under the engine's directories (overlay layers, netns files), as
# /proc/mounts names them (symbolic links resolved).
data=$(realpath -m "$DOCKER_DATA") run=$(realpath -m "$DOCKER_RUN")
awk '{print $2}' /proc/mounts | { grep -E "^($data|$run)/" || true; } | sort -r | while read -r m; do
	umount "$m" 2>/dev/null || umount -l "$m"
done
if [[ -e /run/netns/$DOCKER_NETNS ]]; then
	ip netns del "$DOCKER_NETNS" && log "removed network namespace $DOCKER_NETNS"
fi
if [[ -f $DOCKER_RUN/created-paths ]]; then
	while read -r p; do
		if [[ $p == /run/netns ]]; then
			# ip netns add makes it a mount point of its own; one with
			# another runtime's namespaces in it stays.
			[[ -n $(ls -A "$p" 2>/dev/null) ]] && continue
			umount "$p" 2>/dev/null || true
			if rmdir "$p" 2>/dev/null; then log "removed $p"; fi
		elif [[ -e $p ]]; then
			# Only this engine could have written there: the local
			# cluster does not start while /run/containerd exists.
			rm -rf "$p" && log "removed $p"
		fi
	done <"$DOCKER_RUN/created-paths"
fi
rm -rf "$DOCKER_RUN"
if [[ ${PURGE:-0} == 1 ]]; then rm -rf "$DOCKER_DATA" && log "removed $DOCKER_DATA"; fi
