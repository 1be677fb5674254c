#!/usr/bin/env bash
# Builds the pinned Kubernetes components and etcd that the local test cluster
# and envtest run, from the Go module proxy (no git checkout, no registry).
#
#   hack/cluster/build.sh            build everything that is missing
#   hack/cluster/build.sh etcd kube-apiserver kubectl   only these
#
# Versions come from the wrapper modules' go.mod files (hack/cluster/k8s,
# hack/cluster/etcd), so bumping a version is a go.mod change. Binaries land in
# a directory keyed by version and are never rebuilt once present:
#   $CACHE_DIR/k8s/<version>/bin/{kube-apiserver,kubelet,kube-controller-manager,kube-scheduler,kubectl}
#   $CACHE_DIR/etcd/<version>/bin/etcd
#   $CACHE_DIR/envtest/{etcd,kube-apiserver,kubectl}   symlinks: KUBEBUILDER_ASSETS
# CACHE_DIR defaults to <repo>/.cache (git-ignored).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE_DIR=${CACHE_DIR:-$ROOT/.cache}
GO=${GO:-go}

K8S_COMPONENTS=(kube-apiserver kubelet kube-controller-manager kube-scheduler kubectl)
# Built only when named: the kind node image (hack/kind) needs them, the
# local cluster does not.
KIND_COMPONENTS=(kubeadm kube-proxy)
ALL=("${K8S_COMPONENTS[@]}" etcd "${KIND_COMPONENTS[@]}")

# modversion <go.mod> <module>: the version a wrapper module requires.
modversion() {
	awk -v m="$2" '$1 == "require" && $2 == m { print $3; exit } $1 == m && $2 ~ /^v/ { print $2; exit }' "$1"
}
K8S_VERSION=$(modversion "$HERE/k8s/go.mod" k8s.io/kubernetes)
ETCD_VERSION=$(modversion "$HERE/etcd/go.mod" go.etcd.io/etcd/server/v3)
[[ -n $K8S_VERSION && -n $ETCD_VERSION ]] || { echo "build.sh: cannot read versions from the wrapper go.mod files" >&2; exit 1; }
K8S_BIN=$CACHE_DIR/k8s/$K8S_VERSION/bin
ETCD_BIN=$CACHE_DIR/etcd/$ETCD_VERSION/bin
ENVTEST_DIR=$CACHE_DIR/envtest

want=("$@")
[[ ${#want[@]} -gt 0 ]] || want=("${K8S_COMPONENTS[@]}" etcd)
for c in "${want[@]}"; do
	[[ " ${ALL[*]} " == *" $c "* ]] || { echo "build.sh: unknown component $c (known: ${ALL[*]})" >&2; exit 2; }
done

mkdir -p "$K8S_BIN" "$ETCD_BIN" "$ENVTEST_DIR"
# Two builds at once (say envtest assets and the e2e suite) would compile the
# same thing twice on two cores; the second waits and then finds it done.
exec 9>"$CACHE_DIR/.build.lock"
flock 9
rm -rf "$K8S_BIN"/.tmp.* "$ETCD_BIN"/.tmp.* # left by an interrupted build

T0=$SECONDS
log() { echo "[build $((SECONDS - T0))s] $*"; }

export CGO_ENABLED=0
# -modcacherw keeps the module cache deletable by a plain rm -rf.
export GOFLAGS="${GOFLAGS:-} -modcacherw"

# build <module dir> <bin dir> <ldflags> <name=import path>...: builds the
# missing commands into a scratch dir and moves each into place, so an
# interrupted build never leaves a truncated binary that would be "cached".
build() {
	local dir=$1 bin=$2 ldflags=$3; shift 3
	local pkgs=() names=() kv
	for kv in "$@"; do
		[[ -x $bin/${kv%%=*} ]] && continue
		names+=("${kv%%=*}"); pkgs+=("${kv#*=}")
	done
	[[ ${#pkgs[@]} -gt 0 ]] || return 0
	log "building ${names[*]} (cold: minutes)"
	local tmp
	tmp=$(mktemp -d "$bin/.tmp.XXXXXX")
	# With one package -o names the file: go would call etcd's "server".
	local o=$tmp/
	[[ ${#pkgs[@]} -eq 1 ]] && o=$tmp/${names[0]}
	(cd "$dir" && "$GO" build -trimpath -ldflags "$ldflags" -o "$o" "${pkgs[@]}") || { rm -rf "$tmp"; return 1; }
	local n
	for n in "${names[@]}"; do mv -f "$tmp/$n" "$bin/$n"; done
	rmdir "$tmp"
	log "built ${names[*]}"
}

k8s=()
for c in "${want[@]}"; do
	[[ $c == etcd ]] || k8s+=("$c=k8s.io/kubernetes/cmd/$c")
done
if [[ ${#k8s[@]} -gt 0 ]]; then
	minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
	ld="-s -w"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
	done
	build "$HERE/k8s" "$K8S_BIN" "$ld" "${k8s[@]}"
fi
if [[ " ${want[*]} " == *" etcd "* ]]; then
	build "$HERE/etcd" "$ETCD_BIN" "-s -w" "etcd=go.etcd.io/etcd/server/v3"
fi

# The envtest directory points at whichever of its three binaries exist.
# Relative links keep working when the checkout moves.
for n in etcd kube-apiserver kubectl; do
	rel=k8s/$K8S_VERSION/bin/$n
	[[ $n == etcd ]] && rel=etcd/$ETCD_VERSION/bin/$n
	if [[ -x $CACHE_DIR/$rel ]]; then ln -sfn "../$rel" "$ENVTEST_DIR/$n"; fi
done
log "k8s $K8S_VERSION in $K8S_BIN; etcd $ETCD_VERSION in $ETCD_BIN; KUBEBUILDER_ASSETS=$ENVTEST_DIR"
