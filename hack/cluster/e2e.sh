#!/usr/bin/env bash
# Runs the end-to-end suite on a fresh local cluster, as root:
#   build (make build, Kubernetes binaries, images) -> up.sh ->
#   go test -tags e2e ./test/e2e/... -> down.sh, always (trap).
# Extra arguments go to go test, e.g. hack/cluster/e2e.sh -run TestHarness.
# K8S_VERSION picks the Kubernetes minor (hack/cluster/k8s/minors; default:
# the default one), e.g. K8S_VERSION=1.35 hack/cluster/e2e.sh, and NODES the
# number of nodes (lib.sh: 3; with 1 the tests that need the others skip);
# the tests get them, and the rest of $CLUSTER_DIR/env (MIGFLEX_NODES,
# MIGFLEX_CDI_DIR, ...), exported.
# On failure the component logs and a dump of the cluster's state stay in
# $CLUSTER_DIR/logs (until the next up.sh) and their tails are printed.
# SKIP_BUILD=1 skips make build (bin/ already built).
set -euo pipefail
# shellcheck source=hack/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ $EUID -eq 0 ]] || die "needs root (it runs a kubelet and changes host networking)"
cd "$ROOT"

if [[ ${SKIP_BUILD:-0} != 1 ]]; then
	make build
fi
"$HACK_CLUSTER/build.sh"
"$HACK_CLUSTER/images.sh"
# The pinned helm, for the test that installs migflex with its chart.
HELM=$("$ROOT/deployments/hack/install-helm.sh")
t_build=$((SECONDS - T0))

export HELM

rc=0
# Only a cluster this script brought up is torn down here: a failed up.sh has
# already undone its own changes, and one that refused (exit 3) found another
# cluster, which is not ours to stop.
up_done=0
finish() {
	local status=$?
	[[ $rc -ne 0 ]] || rc=$status
	trap - EXIT INT TERM
	if [[ $rc -ne 0 && $up_done -eq 1 ]]; then
		# State and log tails from the running cluster, before the tear-down
		# fills the logs with shutdown noise.
		if [[ -n $(pid_of kube-apiserver) ]]; then
			{
				kubectl get nodes -o wide
				kubectl describe nodes
				kubectl get pods -A -o wide
				kubectl get events -A --sort-by=.lastTimestamp
			} >"$LOG_DIR/cluster-state.txt" 2>&1 || true
		fi
		echo "e2e failed (exit $rc); component log tails (full logs stay in $LOG_DIR until the next up.sh):" >&2
		for f in "$LOG_DIR"/*.log "$LOG_DIR"/cluster-state.txt; do
			[[ -s $f ]] || continue
			echo "----- $f" >&2
			tail -n 25 "$f" >&2
		done
	fi
	local t=$SECONDS
	if [[ $up_done -eq 1 ]]; then
		"$HACK_CLUSTER/down.sh" || { [[ $rc -ne 0 ]] || rc=1; }
	fi
	t_down=$((SECONDS - t))
	log "Kubernetes $K8S_VERSION, $NODES nodes: timings: build ${t_build}s, up ${t_up:-?}s, tests ${t_tests:-?}s, down ${t_down}s"
	exit "$rc"
}
trap finish EXIT
trap 'rc=130; exit 130' INT TERM

t=$SECONDS
"$HACK_CLUSTER/up.sh"
up_done=1
t_up=$((SECONDS - t))
# shellcheck source=/dev/null # written by up.sh
source "$CLUSTER_ENV"

t=$SECONDS
go test -tags e2e -count=1 -timeout 30m -v ./test/e2e/... "$@" || rc=$?
t_tests=$((SECONDS - t))
