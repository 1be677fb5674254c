#!/usr/bin/env bash
# Builds the cluster binaries that make test's e2e steps build later (the
# default minor's kubelet, controller manager and scheduler, containerd,
# and the oldest minor's five Kubernetes binaries) into a staging cache of
# its own, and moves each into the cache once built; then cross-builds
# migflex for arm64 into the staging cache, for the Go build cache that
# make test-arm64, make test's last step, then links from. .ci/run starts it in
# the background at the lowest CPU priority: on 2 cores the compiles of
# make test's first steps keep both busy, and this one then gets next to
# nothing, but the e2e suites leave the cores mostly idle, and from a cold
# Go build cache these builds were about 10 minutes of CI's run.
#
# It changes nothing make test relies on: a binary already in the cache is
# not built, one a step of make test built first is not replaced (mv -n, a
# rename on the same file system), the staging cache has its own build lock
# and envtest links, and a failure here costs only the time: the steps build
# what is missing, as without it.
set -euo pipefail

HACK_CLUSTER=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HACK_CLUSTER/../.." && pwd)
DEST=${CACHE_DIR:-$ROOT/.cache}
STAGE=$DEST/prebuild

oldest=$(awk '!/^#/ && NF { print $1; exit }' "$HACK_CLUSTER/k8s/minors")
[[ -n $oldest ]] || { echo "prebuild.sh: no minor in $HACK_CLUSTER/k8s/minors" >&2; exit 2; }

# move_built moves what the staging cache holds into the cache, each file
# only where the cache lacks it.
move_built() {
	local dir rel f
	for dir in "$STAGE"/k8s/*/bin "$STAGE"/containerd/*/bin; do
		[[ -d $dir ]] || continue
		rel=${dir#"$STAGE"/}
		mkdir -p "$DEST/$rel"
		for f in "$dir"/*; do
			[[ -f $f && -x $f ]] || continue
			mv -n "$f" "$DEST/$rel/"
		done
	done
}

# missing lists which of the components the cache lacks for a minor ("" is
# the default one): containerd by ctr, the last of its three moved in.
missing() {
	local minor=$1 c file dirs k8s_bin containerd_bin
	shift
	dirs=$(CACHE_DIR=$DEST K8S_VERSION=$minor bash -c 'HACK_CLUSTER=$1; source "$1/versions.sh"; echo "$K8S_BIN $CONTAINERD_BIN"' _ "$HACK_CLUSTER")
	read -r k8s_bin containerd_bin <<<"$dirs"
	for c in "$@"; do
		file=$k8s_bin/$c
		[[ $c == containerd ]] && file=$containerd_bin/ctr
		[[ -x $file ]] || echo "$c"
	done
}

T0=$SECONDS
# prebuild MINOR COMPONENT...: builds into the staging cache what the cache
# lacks, and moves it in.
prebuild() {
	local minor=$1 want
	shift
	want=$(missing "$minor" "$@" | sort -u | tr '\n' ' ')
	if [[ -z ${want// /} ]]; then
		echo "[prebuild $((SECONDS - T0))s] Kubernetes ${minor:-default}: nothing to build"
		return
	fi
	# shellcheck disable=SC2086 # the list of components, split on purpose
	CACHE_DIR=$STAGE K8S_VERSION=$minor "$HACK_CLUSTER/build.sh" $want
	move_built
	echo "[prebuild $((SECONDS - T0))s] Kubernetes ${minor:-default}: $want in $DEST"
}

prebuild "" kubelet kube-controller-manager kube-scheduler containerd
prebuild "$oldest" kube-apiserver kubelet kube-controller-manager kube-scheduler kubectl

# make test-arm64's cross build (hack/check-arm64.sh), from a cold build
# cache about 6 minutes of compiling migflex's dependencies for arm64: done
# here, the check links from the Go build cache. It needs the C cross
# compiler that make test-deps, make test's first step, installs.
if command -v aarch64-linux-gnu-gcc >/dev/null; then
	# The binaries are not what is kept (make test-arm64 links its own):
	# the build cache is.
	make -C "$ROOT" --no-print-directory build GOARCH=arm64 BIN="$STAGE/linux_arm64" >/dev/null
	rm -rf "$STAGE/linux_arm64"
	echo "[prebuild $((SECONDS - T0))s] arm64: migflex cross-built (the Go build cache has it for make test-arm64)"
else
	echo "[prebuild $((SECONDS - T0))s] arm64: no aarch64-linux-gnu-gcc (make test-deps installs it); not built"
fi
